//! The wire of the emulated ConnectX-class RDMA NIC: real RoCEv2 packet bytes, and the
//! fabrics that carry them between emulated NICs.
//!
//! Facts come from `docs/rocev2.md` (the sections of it in brackets below).
//!
//! * [`packet`] — IPv4, UDP, BTH and extension headers (#encapsulation,
//!   #base-transport-header, #extension-headers), the opcode table (#opcodes),
//!   whole-packet [`Packet::encode`] / [`Packet::decode`] with every check, and the
//!   UDP-payload form for sockets. `core` + `alloc` only.
//! * [`icrc`] — the invariant CRC (#icrc), checked against a frame captured from real hardware.
//! * [`seg`] — MTUs and segmentation into FIRST/MIDDLE/LAST/ONLY packets (#segmentation).
//! * [`transport`] — PSN arithmetic, retransmit and RNR timers, UDP source ports
//!   (#encapsulation, #reliability).
//! * [`gid`] — IPv4-mapped GIDs (#gids).
//! * [`mad`] — the MAD common header and CM constants for QP1 (#qp1-and-cm-mads).
//! * [`eth`] — Ethernet II framing and ARP, for the Ethernet fabric.
//! * `fabric` (feature `std`, on by default) — the [`fabric::Fabric`] / [`fabric::Port`]
//!   traits and three backends: a deterministic in-process network with seeded fault
//!   injection, UDP sockets on 127.0.0.0/8, and raw Ethernet in QEMU's socket-netdev format
//!   (with ARP) for talking to a QEMU guest's NIC.
//!
//! Without the `std` feature the crate is `no_std` + `alloc`.
//!
//! ```
//! use core::net::Ipv4Addr;
//! use roce_wire::packet::{Bth, Opcode, Packet, WireError};
//!
//! let src = Ipv4Addr::new(127, 0, 0, 10);
//! let dst = Ipv4Addr::new(127, 0, 0, 11);
//! let mut bth = Bth::new(Opcode::RcSendOnly, 0x12, 100); // dest QP 0x12, PSN 100
//! bth.ack_req = true;
//! let pkt = Packet::new(src, dst, bth, b"hello".to_vec());
//!
//! let frame = pkt.encode()?; // IPv4 + UDP + BTH + payload + 3 pad bytes + ICRC
//! assert_eq!(frame.len(), 20 + 8 + 12 + 5 + 3 + 4);
//!
//! let back = Packet::decode(&frame)?;
//! assert_eq!(back.payload, b"hello");
//! assert_eq!(back.bth.pad_count, 3);
//! assert_eq!((back.bth.dest_qp, back.bth.psn, back.bth.ack_req), (0x12, 100, true));
//!
//! // Any flipped bit after the UDP header is caught by the ICRC.
//! let mut bad = frame.clone();
//! bad[45] ^= 1;
//! assert!(matches!(Packet::decode(&bad), Err(WireError::BadIcrc { .. })));
//! # Ok::<(), WireError>(())
//! ```
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

pub mod eth;
#[cfg(feature = "std")]
pub mod fabric;
pub mod gid;
pub mod icrc;
pub mod mad;
pub mod packet;
pub mod seg;
pub mod transport;

pub use gid::{gid_from_ipv4, ipv4_from_gid};
pub use packet::{Packet, PacketView, WireError};
pub use seg::{Mtu, mtu_bytes, packet_count};
