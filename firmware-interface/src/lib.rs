//! The mlx5 (NVIDIA ConnectX) device contract: every layout, opcode, status and syndrome the
//! driver and the emulated device agree on. No logic lives here beyond field access.
//!
//! Command messages and object contexts are described by [`Field`] constants named after the
//! PRM (`mlx5_ifc.h`) fields, one module per layout; fixed-size structures that sit in rings
//! (CQEs, EQEs, WQE segments, command entries, mailbox blocks) are `#[repr(C)]` structs of
//! big-endian words. All values are big-endian on the wire and in memory.
//!
//! ```
//! use firmware_interface::{cmds::create_cq_out, opcode};
//! let mut out = [0u8; create_cq_out::SIZE];
//! create_cq_out::CQN.set(&mut out, 0x42);
//! assert_eq!(out[0x9..0xc], [0, 0, 0x42]);
//! assert_eq!(opcode::CREATE_CQ, 0x400);
//! ```
#![no_std]

pub mod field;

pub use field::{Be16, Be32, Be64, Field};
