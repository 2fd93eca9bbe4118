//! The device contracts: mlx5 (NVIDIA ConnectX) at the top level and AWS EFA in [`efa`].
//!
//! The mlx5 (NVIDIA ConnectX) device contract: every layout, opcode, status and syndrome the
//! driver and the emulated device agree on. No logic lives here beyond field access.
//!
//! Command messages and object contexts are described by [`Field`] constants named after the
//! PRM (`mlx5_ifc.h`) fields, one module per layout; fixed-size structures that sit in rings
//! (CQEs, EQEs, WQE segments, command entries, mailbox blocks) are `#[repr(C)]` structs of
//! big-endian words. All values are big-endian on the wire and in memory.
//!
//! Module map (the section of `docs/mlx5.md` in brackets):
//! * [`init_seg`] — BAR0 initialization segment and health buffer (#initialization-segment)
//! * [`cmd`], [`mbox_in`], [`mbox_out`], [`cmd_status`], [`delivery_status`] — the command
//!   interface (#command-interface)
//! * [`opcode`], [`op_mod`], [`cmds`] — command opcodes and per-command layouts (#commands)
//! * [`ctx`] — capability pages and object contexts (#capabilities, #object-contexts)
//! * [`uar`], [`dbr`] — UAR pages and doorbell records (#uar-pages-and-doorbells,
//!   #doorbell-records)
//! * [`wqe`], [`cqe`], [`eqe`] — ring entries (#work-queue-entries,
//!   #completion-queue-entries, #event-queue-entries)
//! * [`pci`] — PCI identification (#pci-identification)
//!
//! The AWS EFA contract (little-endian, `docs/efa.md`) is the [`efa`] module.
//!
//! ```
//! use firmware_interface::{cmds::create_cq_out, opcode};
//! let mut out = [0u8; create_cq_out::SIZE];
//! create_cq_out::CQN.set(&mut out, 0x42);
//! assert_eq!(out[0x9..0xc], [0, 0, 0x42]);
//! assert_eq!(opcode::CREATE_CQ, 0x400);
//! ```
#![no_std]

#[macro_use]
mod macros;

pub mod field;

pub mod cmd;
pub mod cmds;
pub mod cqe;
pub mod ctx;
pub mod efa;
pub mod eqe;
pub mod init_seg;
pub mod opcode;
pub mod pci;
pub mod status;
pub mod uar;
pub mod wqe;

pub use cmd::{mbox_in, mbox_out};
pub use field::{Be16, Be32, Be64, Field, Le16, Le32, Le64, LeField};
pub use status::{cmd_status, delivery_status, op_mod};
pub use uar::dbr;
