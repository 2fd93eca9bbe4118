//! The C ABI of rdma-core 44's `libibverbs.so.1` and `librdmacm.so.1` on x86-64, as
//! `#[repr(C)]` Rust types and constants: what compiled C programs read and write in the
//! objects the libraries hand them, and the values they pass.
//!
//! Names are the C names (`ibv_context`, `IBV_QPS_RTS`) so that a field path reads the same in
//! both languages; the layout test (`tests/layout.rs`) compiles a C program against Debian's
//! `libibverbs-dev` / `librdmacm-dev` headers and compares every offset, size and enum value
//! listed there with this crate's.
//!
//! C's anonymous unions need a name in Rust: `ibv_wc::imm` (`imm_data` /
//! `invalidated_rkey`), `ibv_send_wr::imm` (`imm_data` / `invalidate_rkey`) and
//! `ibv_send_wr::ext` (`bind_mw` / `tso`), `rdma_addr::src` / `dst` (the socket addresses).
//! Their members sit at the offsets C gives them.
//!
//! Only types and constants live here: the libraries that implement the calls are the
//! `capi-ibverbs` and `capi-rdmacm` cdylibs.

#![allow(non_camel_case_types, non_snake_case)]

pub mod ibv;
pub mod rdmacm;
