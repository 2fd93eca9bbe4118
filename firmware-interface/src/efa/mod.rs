//! The AWS EFA (Elastic Fabric Adapter) device contract: every register, admin queue entry,
//! command and response layout, feature block and data-path descriptor the EFA driver and the
//! emulated EFA device agree on (`docs/efa.md`). No logic lives here beyond field access.
//!
//! Everything EFA is **little-endian** (`docs/efa.md#conventions`): registers, admin entries,
//! descriptors and completions. Command and response bodies are described by [`LeField`]
//! constants (bit offsets from the least significant bit of byte 0), one module per layout;
//! fixed-size ring entries are `#[repr(C)]` structs of [`Le16`]/[`Le32`]/[`Le64`] words with
//! explicit reserved bytes (no padding, alignment 1).
//!
//! Module map (the section of `docs/efa.md` in brackets):
//! * [`regs`] — BAR0 registers and the read-less register-read response (#bar0-registers,
//!   #read-less-register-reads)
//! * [`admin`] — admin submission / completion / async-event / event-queue entries, admin
//!   status codes, the control buffer and page-list chunks (#admin-queues)
//! * [`opcode`], [`cmds`] — admin opcodes and per-command layouts (#admin-commands)
//! * [`feature`] — feature ids and GET/SET_FEATURE blocks (#features)
//! * [`io`] — TX WQEs, RX descriptors, completion entries and statuses (#data-path)
//! * [`pci`] — PCI identification and BARs (#pci-identification)
//!
//! ```
//! use firmware_interface::efa::{cmds::create_cq_resp, opcode};
//! let mut acq = [0u8; 64];
//! create_cq_resp::CQ_IDX.set(&mut acq, 0x42);
//! assert_eq!(acq[8..10], [0x42, 0]);
//! assert_eq!(opcode::CREATE_CQ, 9);
//! ```
//!
//! [`LeField`]: crate::LeField
//! [`Le16`]: crate::Le16
//! [`Le32`]: crate::Le32
//! [`Le64`]: crate::Le64

pub mod admin;
pub mod cmds;
pub mod feature;
pub mod io;
pub mod opcode;
pub mod pci;
pub mod regs;
