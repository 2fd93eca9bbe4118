//! Release-mode timing of the CRC-32 / ICRC (a benchmark, never a test).
//!
//! ```sh
//! cargo run --release -p roce-wire --example icrc_speed
//! ```
//!
//! Prints the throughput of [`roce_wire::icrc::crc32`] over a 4 KiB buffer and of
//! [`roce_wire::icrc::icrc_udp_payload`] over a 4 KiB transport (BTH + payload), each the best
//! of several rounds (this machine's clocks are noisy; the best round is the least disturbed).
//!
//! `ICRC_SPEED_MIB=1` shrinks a round to 1 MiB and runs one round, for counting instructions
//! under `valgrind --tool=callgrind` instead.

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Instant;

use roce_wire::icrc;

/// Bytes per buffer.
const LEN: usize = 4096;
/// Rounds; the fastest one is reported.
const ROUNDS: usize = 7;
/// MiB hashed per round (unless `ICRC_SPEED_MIB` says otherwise).
const MIB_PER_ROUND: usize = 256;

fn best_mb_per_s(mut f: impl FnMut() -> u32) -> (f64, u32) {
    let (mib, rounds) = match std::env::var("ICRC_SPEED_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(m) => (m, 1),
        None => (MIB_PER_ROUND, ROUNDS),
    };
    let iters = (mib << 20) / LEN;
    let mut best = f64::MAX;
    let mut last = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..iters {
            last = black_box(f());
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    ((iters * LEN) as f64 / best / 1e6, last)
}

fn main() {
    let buf: Vec<u8> = (0..LEN as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let (crc_rate, crc) = best_mb_per_s(|| icrc::crc32(black_box(&buf)));
    println!("crc32            4 KiB: {crc_rate:8.0} MB/s  (crc {crc:#010x})");

    let src = Ipv4Addr::new(127, 0, 0, 20);
    let dst = Ipv4Addr::new(127, 0, 0, 21);
    let (icrc_rate, ic) =
        best_mb_per_s(|| icrc::icrc_udp_payload(src, dst, 49152, black_box(&buf)));
    println!("icrc_udp_payload 4 KiB: {icrc_rate:8.0} MB/s  (icrc {ic:#010x})");
}
