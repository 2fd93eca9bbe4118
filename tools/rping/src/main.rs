//! `rping`: librdmacm's `rping` example on the kernel-bypass RDMA stack, interoperating with
//! rdma-core's own `rping` (librdmacm/examples/rping.c).
//!
//! Three modes, all through the connection manager (`cm`): `getaddrinfo`, `create_ep`,
//! `listen` / `get_request` / `accept` on the server, `connect` on the client.
//! - EMBEDDED (neither `-s` nor `-c`): the server and the client live in this process, each on
//!   its own thread and its own emulated ConnectX-class NIC (mlx5 driver), the two NICs joined
//!   by the in-process RoCEv2 fabric of one `nic_testbed::World`. Both threads block in
//!   synchronous CM calls, which drive the one shared progress engine.
//! - SERVER (`-s -a ADDR`) and CLIENT (`-c -a ADDR [-I SRC]`): one end per process, each on
//!   its own emulated NIC (the device on a poller thread, real time), on one of two fabrics:
//!   * `--fabric udp:PORT` (the default, port 4791): `nic_testbed::UdpNic`, a UDP socket on
//!     `ADDR:PORT` in 127.0.0.0/8 as the NIC's port. There is no ARP on that fabric: an
//!     emulated NIC's MAC is derived from its address, and each end enters the MACs of its
//!     own /24 in the CM's neighbour table.
//!   * `--fabric eth:LOCAL,REMOTE`: `nic_testbed::EthNic`, raw Ethernet frames over UDP in
//!     the format of QEMU's socket netdev (`-netdev socket,udp=127.0.0.1:LOCAL,
//!     localaddr=127.0.0.1:REMOTE` is the other end). The NIC has a MAC and an IPv4 address
//!     on that virtual wire (`-a` for the server, `-I` for the client), answers ARP and
//!     resolves its peers by ARP; on the host only the two 127.0.0.1 sockets are used. This
//!     is how it talks to Linux soft-RoCE (`rdma_rxe`) and rdma-core's `rping` in a guest.
//!
//! Each ping follows rping: the client fills its source buffer with rping's pattern
//! (`rdma-ping-N: ` then a rotating run of ASCII letters starting one further each ping, NUL
//! at the end) and SENDs the buffer's address, rkey and length (`struct rping_rdma_info
//! { __be64 buf; __be32 rkey; __be32 size; }`: 16 bytes, network byte order); the server RDMA
//! READs that many bytes, SENDs "go ahead"; the client SENDs its sink buffer's address, rkey
//! and length; the server RDMA WRITEs `strlen(data) + 1` bytes there and SENDs "go ahead";
//! the client compares sink and source. As rdma-core's, the server serves one connection and
//! loops until the client disconnects (`-C` does not limit it), and its buffer takes any
//! ping size rping allows; the default size is rping's 64 bytes.
//!
//! ```text
//! rping                      # 10 pings of 64 bytes, embedded
//! rping -C 5 -S 4096 -v -V   # print each ping, report validation
//! rping -s -a 127.0.0.2                 # server (one connection)
//! rping -c -a 127.0.0.2 -C 5 -v -V      # client, from 127.0.0.1
//! rping -s -a 10.77.0.1 --fabric eth:48030,48031 -v       # server on an Ethernet link
//! rping -c -a 10.77.0.2 -I 10.77.0.1 --fabric eth:48030,48031 -C 10 -v -V
//! ```
//!
//! Exit status: 0 all pings verified (server: the client disconnected after its pings), 1 run
//! failure or data mismatch, 2 bad command line.
//!
//! Modules: `cli` (the command line), `exchange` (rping's exchange over a connection) and
//! `fabric` (the NICs and the CM connections it runs on); this file dispatches and reports.

#[cfg(feature = "emulator")]
mod cli;
#[cfg(feature = "emulator")]
mod exchange;
#[cfg(feature = "emulator")]
mod fabric;

#[cfg(not(feature = "emulator"))]
fn main() -> std::process::ExitCode {
    eprintln!(
        "rping: every mode of rping runs on emulated NICs: this rping was built without the \
         `emulator` feature"
    );
    std::process::ExitCode::from(2)
}

#[cfg(feature = "emulator")]
use std::process::ExitCode;
#[cfg(feature = "emulator")]
use std::time::Duration;

#[cfg(feature = "emulator")]
use crate::cli::{CliError, USAGE, parse};
#[cfg(feature = "emulator")]
use crate::fabric::{connect, embedded, serve};

/// The devices rping runs on: any provider the tools can open (`device_open`).
#[cfg(feature = "emulator")]
use device_open::Device as Dev;

#[cfg(feature = "emulator")]
fn per_ping(elapsed: Duration, n: u32) -> String {
    let ms = elapsed.as_secs_f64() * 1e3;
    if n == 0 {
        return format!("{ms:.1} ms");
    }
    format!("{ms:.1} ms, {:.3} ms per ping", ms / f64::from(n))
}

#[cfg(feature = "emulator")]
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(CliError::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(CliError::Bad(m)) => {
            eprintln!("rping: {m}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    exchange::EVENT_MODE.store(o.events, std::sync::atomic::Ordering::Relaxed);
    let v = if o.validate { ", validated" } else { "" };
    if o.server {
        return match serve(&o) {
            Ok(s) => {
                eprintln!(
                    "rping: server: {} pings in {}",
                    s.pings,
                    per_ping(s.elapsed, s.pings)
                );
                println!(
                    "rping: server: {} pings of {} bytes{v}; the client disconnected",
                    s.pings, s.len
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rping: {e}");
                ExitCode::from(1)
            }
        };
    }
    let (mode, r) = if o.client {
        ("client", connect(&o))
    } else {
        ("embedded", embedded(&o))
    };
    match r {
        Ok(c) => {
            eprintln!(
                "rping: {mode}: {} pings in {}",
                c.pings,
                per_ping(c.elapsed, c.pings)
            );
            println!("rping: {mode}: {} pings of {} bytes{v}", c.pings, o.size);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rping: {e}");
            ExitCode::from(1)
        }
    }
}
