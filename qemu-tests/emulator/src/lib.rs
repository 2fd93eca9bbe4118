//! `nic-emulator`: emulated RDMA NICs that real drivers are tested against, one module per
//! device family, sharing only the host-side pieces:
//!
//! * [`connectx`] — the ConnectX-class (mlx5) NIC, described below; its public items are
//!   re-exported here ([`Device`], [`Profile`], [`Live`], ...);
//! * [`efa`] — the AWS EFA device (`docs/efa.md`): register file, read-less register reads,
//!   admin queues and commands, objects; no data path yet;
//! * shared by both: the DMA view of host memory ([`AddressSpace`], [`DmaFault`]), BAR
//!   backing stores ([`BarMemory`], [`VecBar`]) and the QEMU host glue ([`host`], and
//!   [`ivshmem`] for MSI-X through an `ivshmem-doorbell` function).
//!
//! # The ConnectX model
//!
//! The device is a device: it sees only register accesses to its BAR0 and DMA through an
//! [`AddressSpace`] (an IOMMU view of host memory), and it is as strict as hardware — every
//! driver mistake it can detect comes back as a delivery status, a command status + syndrome
//! (see [`syndrome`]), or a [`DeviceError`]; nothing a driver writes can make it panic.
//!
//! What is modelled (`docs/mlx5.md`, its checklist in `docs/mlx5.md#device-model`, and
//! `docs/rocev2.md`):
//! * the initialization segment (firmware revision, command queue address, `initializing`,
//!   health buffer and counter, internal timer) — `regs`;
//! * the command queue: entries, mailbox chains, tokens, block numbers, signatures, delivery
//!   status, CMD events — `cmdq`;
//! * a physical function (default) or a virtual function ([`Profile::connectx5_vf`]: VF
//!   capabilities, the PF's HOST_ENDIANNESS register refused);
//! * the firmware commands of bring-up and of the verbs objects (UAR, PD, TD, EQ, CQ, MKEY, QP
//!   and its state machine, SRQs — as receive memory pools (CREATE/MODIFY/QUERY/DESTROY_RMP)
//!   once ISSI 1 is set, CREATE_SRQ refused then, as at ISSI 0 the RMP commands —, vport,
//!   RoCE GIDs) — `commands`;
//! * firmware pages: QUERY_PAGES / MANAGE_PAGES at boot and init, and at run time
//!   ([`PageRequests`]): creates that wait in their slot until the driver gave the pages a
//!   PAGE_REQUEST event asked for, destroyed objects' pages offered back — `pages`;
//! * event queues: EQE ownership, consumer-index doorbells, overrun → fatal health — `eq`;
//! * the data path — `dp`: send doorbells and BlueFlame bursts, QP doorbell records, send and
//!   receive WQE parsing and validation, MKEY checks (key variant, PD, bounds, access flags)
//!   and PA/MTT translation, CQEs with the owner rule and overrun detection, CQ arming and
//!   completion events, CQ_ERROR and QP affiliated events, error completions and flushes;
//!   RC (PSNs, MTU segmentation, ACK coalescing, sequence / RNR / access / invalid-request
//!   NAKs, go-back-N retransmission on a timer, duplicate detection with READ replay and an
//!   atomic responder resource table, the outstanding READ/atomic limit), UC, UD (Q_Key,
//!   GRH area) and QP1;
//! * the port: real RoCEv2 frames ([`roce_wire`]) on an internal loopback for the device's
//!   own addresses and on a fabric port ([`Device::attach`]) for the rest; to a port that takes
//!   them, runs of RC packets as one [`roce_wire::fabric::Segment`] whose payload the receiving
//!   device reads from this one's memory when it takes the run in (one copy per run), under a
//!   per-QP lease that a flush, reset or destroy withdraws.
//!
//! Not modelled yet: XRC, UMR/KLM keys, memory windows, SEND with invalidate,
//! masked atomics, QUERY_CQ/QUERY_EQ/MODIFY_CQ, IB vport commands (QUERY_HCA_VPORT_*),
//! MSI-X delivery (see [`Device::take_interrupts`]), IPv6 GIDs on the
//! wire, APM, congestion control (CNPs). The ATOMIC capability page offers 8-byte CAS/FAA and
//! host-endian atomic responses (`atomic_req_8B_endianness_mode`, which SET_HCA_CAP checks).
//!
//! Two ways to drive it: trapped ([`Device::mmio_read`] / [`Device::mmio_write`] run whatever
//! the access triggers, inline — a send doorbell runs the SQ and everything that loops back on
//! the device before it returns) or untrapped ([`Device::poll`] looks at a shared BAR and
//! host memory for work). Doorbells are hints; in-memory state (doorbell records, ownership
//! bits) is the truth. [`Device::poll`] is also what takes frames in from the fabric and
//! runs the transport timers, on the clock set by [`Device::set_clock`]; [`spawn_poller`]
//! runs it on a thread.
//!
//! ```
//! use std::sync::Arc;
//! use nic_emulator::{AddressSpace, Device, DmaFault, Profile};
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
//! let mut reg = [0u8; 4];
//! dev.mmio_read(0x4, &mut reg); // cmdif_rev_fw_sub
//! assert_eq!(u32::from_be_bytes(reg) >> 16, 5);
//! // The command doorbell before the queue address is set is a driver bug the device records.
//! for _ in 0..3 {
//!     dev.mmio_read(0x1fc, &mut reg); // wait for `initializing` to clear
//! }
//! dev.mmio_write(0x18, &1u32.to_be_bytes());
//! assert_eq!(dev.errors(), &[nic_emulator::DeviceError::CmdqNotSet]);
//! assert_eq!(dev.live(), nic_emulator::Live::default());
//!
//! // On a deterministic in-process fabric, on the fabric's virtual clock.
//! use nic_emulator::roce_wire::fabric::InProcessFabric;
//! let fabric = InProcessFabric::new(7);
//! let addr = std::net::Ipv4Addr::new(10, 0, 0, 1);
//! dev.attach(Box::new(fabric.attach_port(addr).unwrap()));
//! let f = fabric.clone();
//! dev.set_clock(Arc::new(move || f.now_ns()));
//! assert_eq!(dev.port_addr(), Some(addr));
//! assert!(!dev.poll() || dev.port_stats().rx_frames == 0);
//! ```

pub mod connectx;
pub mod efa;
pub mod host;
pub mod ivshmem;
mod mem;

#[cfg(test)]
mod testmem;

pub use connectx::{
    Clock, CmdRecord, Device, DeviceError, FailCommand, Faults, InterruptSink, Live, OutputHook,
    PageRequests, Polled, Poller, PortStats, Profile, UarWrite, WqeFault, spawn_poller, syndrome,
};
pub use mem::{AddressSpace, BarMemory, DmaFault, VecBar};
/// The RoCEv2 wire crate the ConnectX model speaks (packets, fabrics), re-exported so that
/// users attach devices without naming a second dependency.
pub use roce_wire;
