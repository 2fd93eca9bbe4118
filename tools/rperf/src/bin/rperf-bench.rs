//! `rperf-bench`: the README's figure table from one run (`scripts/bench.sh` calls it).
//!
//! In the same run: rperf's embedded tests (64 B SEND / WRITE latency and message rate,
//! 64 KiB and 1 MiB WRITE / READ bandwidth, through the `rperf` binary next to this one, JSON
//! output), the ceilings and the alternative measured here (memcpy between buffers laid out as
//! rperf's, the most an emulated DMA engine could move; TCP over loopback with `std::net`,
//! ping-pong latency, 64 B message rate and bandwidth), and the driver's fast-path cost
//! (instructions per post and per poll from `scripts/fastpath-cost.sh`'s output, and the
//! zero-allocation test's verdict, both handed in by the script).
//!
//! ```text
//! rperf-bench [--quick] [--fastpath FILE] [--zero-alloc passed|failed] [--readme README.md]
//! ```
//!
//! With `--readme`, the table replaces what is between `<!-- bench-table:begin -->` and
//! `<!-- bench-table:end -->` in that file. Targets are shown, not asserted.

use std::fmt::Write as _;
use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Messages from this size on are "large": the bandwidth target (WRITE at 70% of memcpy)
/// is judged on them; smaller ones show their share of memcpy without a target.
const LARGE: usize = 1 << 20;

/// MB as perftest counts it.
const MB: f64 = (1u64 << 20) as f64;
const BEGIN: &str = "<!-- bench-table:begin -->";
const END: &str = "<!-- bench-table:end -->";

type BoxError = Box<dyn std::error::Error>;

struct Args {
    quick: bool,
    fastpath: Option<PathBuf>,
    zero_alloc: Option<String>,
    readme: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        quick: false,
        fastpath: None,
        zero_alloc: None,
        readme: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{x} needs a value"));
        match x.as_str() {
            "--quick" => a.quick = true,
            "--fastpath" => a.fastpath = Some(val()?.into()),
            "--zero-alloc" => a.zero_alloc = Some(val()?),
            "--readme" => a.readme = Some(val()?.into()),
            "-h" | "--help" => {
                return Err("usage: rperf-bench [--quick] [--fastpath FILE] \
                            [--zero-alloc passed|failed] [--readme README.md]"
                    .into());
            }
            _ => return Err(format!("unknown argument '{x}'")),
        }
    }
    Ok(a)
}

/// The number after `"key":` in a flat JSON object.
fn json_num(line: &str, key: &str) -> Option<f64> {
    let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &line[at..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | 'E' | '+')))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Runs `rperf ARGS --json` (embedded) and returns its one JSON line, checking that the data
/// verified.
fn rperf(args: &[&str]) -> Result<String, BoxError> {
    let exe = std::env::current_exe()?
        .parent()
        .ok_or("no directory")?
        .join("rperf");
    let out = Command::new(&exe).args(args).arg("--json").output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "{} {args:?}: {:?}\n{stdout}\n{}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let line = stdout.lines().next().unwrap_or_default().to_string();
    if !line.contains("\"data_verified\":true") {
        return Err(format!("rperf {args:?}: data did not verify: {line}").into());
    }
    Ok(line)
}

/// A bandwidth row: three rounds of (memcpy of `size`-byte copies for `mc_time`, then
/// [`rperf`]); the rperf run whose average bandwidth is the median of the three, and the
/// median memcpy figure. The machine's speed drifts by a fifth over a bench run, so each
/// RDMA figure is set against memcpy measured next to it, and one round the machine spent
/// partly elsewhere moves neither.
fn bw_row(args: &[&str], size: usize, mc_time: Duration) -> Result<(String, (f64, f64)), BoxError> {
    let mut runs = Vec::new();
    let mut mcs = Vec::new();
    for _ in 0..3 {
        mcs.push(memcpy(size, mc_time));
        runs.push(rperf(args)?);
    }
    let bw = |l: &String| json_num(l, "bw_avg_mb_s").unwrap_or(f64::NAN);
    runs.sort_by(|a, b| bw(a).total_cmp(&bw(b)));
    mcs.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok((runs.swap_remove(1), mcs[1]))
}

/// Bytes of one side's slots for `size` (rperf's layout: up to 16 slots within 1 MiB).
fn slots(size: usize) -> usize {
    ((1 << 20) / size).clamp(1, 16)
}

/// memcpy bandwidth (MB/s) and rate (Mops) of `size`-byte copies cycling over rperf's slots:
/// the median of five windows of `min_time / 5`.
fn memcpy(size: usize, min_time: Duration) -> (f64, f64) {
    let n = slots(size);
    let len = n * size;
    // Laid out as rperf's buffers are: each end has one page-aligned block holding its SRC
    // slots and then its DST slots; a copy goes from one end's SRC to the other's DST. (A
    // plain heap block is not page-aligned, and a block's size decides whether the kernel
    // backs it with huge pages: both move the copy's speed.)
    let mut a_buf = vec![0u8; 2 * len + 4096];
    let mut b_buf = vec![1u8; 2 * len + 4096];
    let src = &mut page_aligned(&mut a_buf, 2 * len)[..len];
    let dst = &mut page_aligned(&mut b_buf, 2 * len)[len..];
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    let src: &[u8] = src;
    let window = min_time / 5;
    let mut windows = Vec::new();
    for _ in 0..5 {
        let mut copies = 0u64;
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                let slot = copies as usize % n;
                let r = slot * size..(slot + 1) * size;
                dst[r.clone()].copy_from_slice(black_box(&src[r]));
                black_box(&mut *dst);
                copies += 1;
            }
            if start.elapsed() >= window {
                break;
            }
        }
        let t = start.elapsed().as_secs_f64();
        windows.push((
            copies as f64 * size as f64 / t / MB,
            copies as f64 / t / 1e6,
        ));
    }
    windows.sort_by(|a, b| a.0.total_cmp(&b.0));
    windows[2]
}

/// The `len` bytes of `buf` from its first page boundary on (`buf` has 4096 bytes to spare).
fn page_aligned(buf: &mut [u8], len: usize) -> &mut [u8] {
    let skip = buf.as_ptr().align_offset(4096).min(4096);
    &mut buf[skip..skip + len]
}

/// TCP over loopback: typical (median) half round trip of `size`-byte ping-pongs, in µs.
/// `spin` makes both ends poll their non-blocking sockets instead of sleeping in `read`
/// (what a poll-mode storage target would do; the RDMA loop polls too).
fn tcp_pingpong(size: usize, iters: usize, spin: bool) -> Result<f64, BoxError> {
    /// Reads exactly `buf.len()` bytes, spinning on `WouldBlock` when the socket is non-blocking.
    fn read_all(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
        let mut got = 0;
        while got < buf.len() {
            match s.read(&mut buf[got..]) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    /// Writes all of `buf`, spinning on `WouldBlock` when the socket is non-blocking.
    fn write_all(s: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
        let mut put = 0;
        while put < buf.len() {
            match s.write(&buf[put..]) {
                Ok(n) => put += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    let l = TcpListener::bind("127.0.7.100:0")?;
    let addr = l.local_addr()?;
    let srv = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = l.accept()?;
        s.set_nodelay(true)?;
        s.set_nonblocking(spin)?;
        let mut buf = vec![0u8; size];
        for _ in 0..iters {
            read_all(&mut s, &mut buf)?;
            write_all(&mut s, &buf)?;
        }
        Ok(())
    });
    let mut c = TcpStream::connect(addr)?;
    c.set_nodelay(true)?;
    c.set_nonblocking(spin)?;
    let msg = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        write_all(&mut c, &msg)?;
        read_all(&mut c, &mut back)?;
        samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    srv.join().map_err(|_| "TCP server thread panicked")??;
    if back != msg {
        return Err("TCP ping-pong: the echo differs".into());
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// TCP over loopback: `count` messages of `size` bytes one way, then a one-byte answer;
/// returns (MB/s, messages per µs).
fn tcp_stream(size: usize, count: usize) -> Result<(f64, f64), BoxError> {
    let l = TcpListener::bind("127.0.7.100:0")?;
    let addr = l.local_addr()?;
    let srv = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut s, _) = l.accept()?;
        s.set_nodelay(true)?;
        let mut buf = vec![0u8; size.max(1 << 16)];
        let mut left = (size * count) as u64;
        let mut sum = 0u64;
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let n = s.read(&mut buf[..want])?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            sum += buf[..n].iter().map(|&b| u64::from(b)).sum::<u64>();
            left -= n as u64;
        }
        s.write_all(&[1])?;
        Ok(sum)
    });
    let mut c = TcpStream::connect(addr)?;
    c.set_nodelay(true)?;
    let msg = vec![1u8; size];
    let start = Instant::now();
    for _ in 0..count {
        c.write_all(&msg)?;
    }
    let mut ack = [0u8; 1];
    c.read_exact(&mut ack)?;
    let t = start.elapsed().as_secs_f64();
    let sum = srv.join().map_err(|_| "TCP server thread panicked")??;
    if sum != (size * count) as u64 {
        return Err("TCP stream: the bytes received differ".into());
    }
    Ok(((size * count) as f64 / t / MB, count as f64 / t / 1e6))
}

/// `instructions per WQE (16/doorbell): N` and `instructions per CQE: N`.
fn fastpath(path: &Option<PathBuf>) -> (String, String) {
    let na = |why: &str| (format!("n/a ({why})"), format!("n/a ({why})"));
    let Some(p) = path else {
        return na("not measured");
    };
    let Ok(t) = std::fs::read_to_string(p) else {
        return na("scripts/fastpath-cost.sh failed");
    };
    let find = |pfx: &str| {
        t.lines()
            .find_map(|l| l.strip_prefix(pfx))
            .and_then(|v| v.split(':').next_back())
            .map(|v| v.trim().to_string())
    };
    match (find("instructions per WQE"), find("instructions per CQE")) {
        (Some(a), Some(b)) => (a, b),
        _ => na("scripts/fastpath-cost.sh failed"),
    }
}

fn cpu() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let n = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {n} CPUs")
}

fn yes_no(ok: bool) -> &'static str {
    if ok { "**met**" } else { "**not met**" }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rperf-bench: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("rperf-bench: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> Result<(), BoxError> {
    // Iterations: each rperf run and each baseline takes about a second (--quick: a tenth).
    let q = |full: u64| if a.quick { (full / 10).max(1) } else { full }.to_string();
    let min_time = Duration::from_millis(if a.quick { 50 } else { 500 });
    let step = |what: &str| eprintln!("rperf-bench: {what}");

    step("rperf send_lat / write_lat, 64 B");
    let send_lat = rperf(&["send_lat", "-s", "64", "-n", &q(100_000)])?;
    let write_lat = rperf(&["write_lat", "-s", "64", "-n", &q(100_000)])?;
    step("rperf send_bw / write_bw, 64 B (message rate)");
    let send_rate = rperf(&["send_bw", "-s", "64", "-n", &q(500_000)])?;
    let write_rate = rperf(&["write_bw", "-s", "64", "-n", &q(500_000)])?;
    step("rperf write_bw / read_bw, 64 KiB and 1 MiB, each next to memcpy (three rounds)");
    let mc_time = min_time / 2;
    let mut bw = Vec::new();
    for (size, n) in [(65536usize, 50_000u64), (LARGE, 5_000)] {
        let s = size.to_string();
        let w = bw_row(&["write_bw", "-s", &s, "-n", &q(n)], size, mc_time)?;
        let r = bw_row(&["read_bw", "-s", &s, "-n", &q(n)], size, mc_time)?;
        bw.push((size, w, r));
    }
    // The same with 4 KiB packets instead of the port's 1 KiB: the per-packet share.
    let w4k = bw_row(
        &["write_bw", "-s", "1048576", "-m", "4096", "-n", &q(5_000)],
        LARGE,
        mc_time,
    )?;
    step("memcpy, 64 B");
    let mc64 = memcpy(64, min_time);
    step("TCP over loopback");
    let tcp_iters = if a.quick { 2_000 } else { 20_000 };
    let tcp_lat_sleep = tcp_pingpong(64, tcp_iters, false)?;
    let tcp_lat_spin = tcp_pingpong(64, tcp_iters, true)?;
    // The target is judged against TCP's better figure.
    let tcp_lat = tcp_lat_sleep.min(tcp_lat_spin);
    let tcp64 = tcp_stream(64, if a.quick { 20_000 } else { 200_000 })?;
    let tcp_bw: Vec<(f64, f64)> = bw
        .iter()
        .map(|(s, ..)| tcp_stream(*s, ((if a.quick { 64 } else { 1024 }) << 20) / *s))
        .collect::<Result<_, _>>()?;
    let (post, poll) = fastpath(&a.fastpath);
    let (post, poll) = if post.starts_with("n/a") {
        (post, poll)
    } else {
        (
            format!("{post} instructions per WQE"),
            format!("{poll} instructions per CQE"),
        )
    };

    let f = |line: &str, k: &str| json_num(line, k).unwrap_or(f64::NAN);
    let lat = |l: &str| f(l, "t_typical_usec");
    let mut t = String::new();
    let _ = writeln!(
        t,
        "Written by `scripts/bench.sh`{} on {}. RDMA figures: rperf's embedded mode (two \
         emulated ConnectX NICs in one process, the mlx5 driver, real RoCEv2 packets, data \
         verified); MB = 2^20 bytes; latency = half the round trip, typical (median).",
        if a.quick { " --quick" } else { "" },
        cpu()
    );
    let _ = writeln!(t);
    let _ = writeln!(
        t,
        "| figure | RDMA stack (emulated) | memcpy (DMA ceiling) | TCP loopback (std::net) | target |"
    );
    let _ = writeln!(t, "| --- | --- | --- | --- | --- |");
    for (name, line) in [("SEND", &send_lat), ("WRITE", &write_lat)] {
        let x = lat(line);
        let _ = writeln!(
            t,
            "| 64 B {name} latency | {x:.2} µs | | {tcp_lat_spin:.2} µs busy-polling, {tcp_lat_sleep:.2} µs blocking (ping-pong) | below TCP's better: {} |",
            yes_no(x < tcp_lat)
        );
    }
    for (name, line) in [("SEND", &send_rate), ("WRITE", &write_rate)] {
        let _ = writeln!(
            t,
            "| 64 B {name} message rate | {:.3} Mpps | {:.1} M copies/s | {:.3} M writes/s | |",
            f(line, "msg_rate_mpps"),
            mc64.1,
            tcp64.1
        );
    }
    let mut rows = Vec::new();
    for ((size, w, r), tb) in bw.iter().zip(&tcp_bw) {
        let label = if *size >= 1 << 20 {
            format!("{} MiB", size >> 20)
        } else {
            format!("{} KiB", size >> 10)
        };
        for (name, (line, m)) in [("WRITE", w), ("READ", r)] {
            let x = f(line, "bw_avg_mb_s");
            let pct = 100.0 * x / m.0;
            let target = if name == "WRITE" && *size >= LARGE {
                format!("≥ 70% of memcpy: {}", yes_no(pct >= 70.0))
            } else {
                String::new()
            };
            rows.push(format!(
                "| {label} {name} bandwidth | {x:.0} MB/s ({pct:.1}% of memcpy) | {:.0} MB/s | {:.0} MB/s | {target} |",
                m.0, tb.0
            ));
        }
    }
    for r in rows {
        let _ = writeln!(t, "{r}");
    }
    {
        let (line, m) = &w4k;
        let x = f(line, "bw_avg_mb_s");
        let _ = writeln!(
            t,
            "| 1 MiB WRITE bandwidth, 4096 B MTU (`-m 4096`) | {x:.0} MB/s ({:.1}% of memcpy) | {:.0} MB/s | | |",
            100.0 * x / m.0,
            m.0
        );
    }
    let _ = writeln!(
        t,
        "| driver post, RDMA WRITE, 16 WQEs per doorbell | {post} | | | (callgrind) |"
    );
    let _ = writeln!(
        t,
        "| driver poll, send CQEs in batches of 16 | {poll} | | | (callgrind) |"
    );
    let za = match a.zero_alloc.as_deref() {
        Some("passed") => "0 (counting allocator: `zero_alloc` test passed)".to_string(),
        Some(other) => format!("`zero_alloc` test {other}"),
        None => "not measured".to_string(),
    };
    let target = match a.zero_alloc.as_deref() {
        None => String::new(),
        Some(v) => format!("zero: {}", yes_no(v == "passed")),
    };
    let _ = writeln!(
        t,
        "| heap allocations per post / poll | {za} | | | {target} |"
    );
    print!("{t}");
    if let Some(p) = &a.readme {
        let old = std::fs::read_to_string(p)?;
        let (Some(b), Some(e)) = (old.find(BEGIN), old.find(END)) else {
            return Err(format!("{}: no {BEGIN} ... {END} markers", p.display()).into());
        };
        if e < b {
            return Err(format!("{}: the markers are out of order", p.display()).into());
        }
        let new = format!("{}{BEGIN}\n{t}{}", &old[..b], &old[e..]);
        std::fs::write(p, new)?;
        eprintln!("rperf-bench: wrote the table into {}", p.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_numbers() {
        let l = r#"{"test":"write_bw","bw_avg_mb_s":356.288,"msg_rate_mpps":5.7e-3,"x":-1}"#;
        assert_eq!(json_num(l, "bw_avg_mb_s"), Some(356.288));
        assert_eq!(json_num(l, "msg_rate_mpps"), Some(0.0057));
        assert_eq!(json_num(l, "x"), Some(-1.0));
        assert_eq!(json_num(l, "nope"), None);
    }

    #[test]
    fn baselines_measure_something() {
        let (mbs, rate) = memcpy(4096, Duration::from_millis(5));
        assert!(mbs > 0.0 && rate > 0.0);
        assert!(tcp_pingpong(64, 50, false).unwrap() > 0.0);
        assert!(tcp_pingpong(64, 50, true).unwrap() > 0.0);
        let (bw, r) = tcp_stream(4096, 100).unwrap();
        assert!(bw > 0.0 && r > 0.0);
    }
}
