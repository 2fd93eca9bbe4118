//! `nvmf-perf`: a fio-like benchmark of an NVMe-oF/RDMA target.
//!
//! Without `--addr` it runs host and target in this process on two emulated NICs of one
//! in-process fabric (virtual time: the numbers measure the stack's work, not a wire), the
//! target serving a 64 MiB RAM namespace. With `--addr IP` it connects to an `nvmf-target`
//! there, from an emulated NIC at `--src` on the UDP fabric or a device from `--device`.
//!
//! ```text
//! nvmf-perf                                        # embedded, randread 4 KiB, qd 16, 2 queues
//! nvmf-perf --rw randwrite --bs 8192 --qd 32 --queues 4 --count 100000 --json
//! nvmf-perf --addr 127.0.0.2 --src 127.0.0.1 --rw read --time 5
//! nvmf-perf --bench --readme README.md            # the README's NVMe-oF figure table
//! ```
//!
//! `--bench` (embedded only) measures the README's table: three rounds of (rperf's embedded
//! 4 KiB RDMA WRITE message rate, `rperf write_bw -s 4096` run from the binary beside this
//! one; 4 KiB random reads at queue depth 32; 4 KiB random writes at queue depth 32; 4 KiB
//! random reads at queue depth 1 for latency), one I/O queue, each run on a fresh pair of
//! emulated NICs; each figure is the round with the median value. It prints a Markdown
//! table, and with `--readme FILE` writes it between `<!-- nvmf-table:begin -->` and
//! `<!-- nvmf-table:end -->` in FILE (refused from a build with debug assertions).
//! `--target-cost FILE` adds the target's instructions per I/O (the output of
//! `scripts/nvmf-target-cost.sh`); `--quick` is a smoke run.
//!
//! The embedded mode runs everything from one loop on one thread, as rperf's embedded mode
//! does: every wait of the host's queue polls the target (`nvmf_rdma_target::PolledTarget`,
//! its listener and every queue), then steps both emulated NICs
//! ([`nvmf_rdma::net::Embedded::one_loop`]). `--threaded` runs the target as `nvmf-target`
//! does instead: its listener and each queue on a thread of their own.
//!
//! Exit status: 0 run complete with no error status and no data mismatch, 1 otherwise, 2 bad
//! command line.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use device_open::{Device, Family, Opened, WithDevice, open_remote};
use nvmf::host::ConnectParams;
use nvmf::namespace::RamNamespace;
use nvmf::target::{Subsystem, Target, TargetConfig};
use nvmf_rdma::net::{EMBEDDED_TARGET_IP, Embedded, Endpoint};
use nvmf_rdma::perf::{self, Job, Report};
use nvmf_rdma::target::{ListenerStats, run_listener};
use nvmf_rdma_target::PolledTarget;

const USAGE: &str = "usage: nvmf-perf [--addr IP [--src IP] [--fabric-port PORT] \
[--device emu|vfio:BDF]] [--port PORT] [--nqn NQN] [--rw read|write|randread|randwrite] \
[--bs BYTES] [--qd N] [--queues N] [--count N | --time SECONDS] [--no-verify] [--nsid N] \
[--range BLOCKS] [--kato MS] [--json] [--threaded] | nvmf-perf --bench [--threaded] [--quick] [--target-cost FILE] \
[--readme FILE]";

const DEFAULT_NQN: &str = "nqn.2024-01.io.rdma-stack:ram0";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:6e766d66-7065-7266-0000-000000000001";

struct Opts {
    addr: Option<Ipv4Addr>,
    src: Ipv4Addr,
    port: u16,
    fabric_port: u16,
    device: Family,
    nqn: String,
    job: Job,
    kato: Option<u32>,
    json: bool,
    /// Embedded: the target's listener and queues on threads of their own.
    threaded: bool,
    bench: Option<bench::Args>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        addr: None,
        src: Ipv4Addr::new(127, 0, 0, 1),
        port: nvmf::rdma::DEFAULT_PORT,
        fabric_port: 4791,
        device: Family::Emu,
        nqn: DEFAULT_NQN.into(),
        job: Job::default(),
        kato: None,
        json: false,
        threaded: false,
        bench: None,
    };
    let mut it = args.iter();
    fn num<T: std::str::FromStr>(a: &str, v: String) -> Result<T, String> {
        v.parse().map_err(|_| format!("{a}: bad value '{v}'"))
    }
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--addr" => o.addr = Some(num(a, val()?)?),
            "--src" => o.src = num(a, val()?)?,
            "--port" => o.port = num(a, val()?)?,
            "--fabric-port" => o.fabric_port = num(a, val()?)?,
            "--device" => o.device = val()?.parse()?,
            "--nqn" => o.nqn = val()?,
            "--rw" => o.job.pattern = val()?.parse()?,
            "--bs" => o.job.bs = num(a, val()?)?,
            "--qd" => o.job.depth = num(a, val()?)?,
            "--queues" => o.job.queues = num(a, val()?)?,
            "--count" => o.job.count = Some(num(a, val()?)?),
            "--time" => {
                let s: f64 = num(a, val()?)?;
                o.job.count = None;
                o.job.time_ms = (s * 1000.0) as u64;
            }
            "--no-verify" => o.job.verify = false,
            "--nsid" => o.job.nsid = num(a, val()?)?,
            "--range" => o.job.range_blocks = num(a, val()?)?,
            "--kato" => o.kato = Some(num(a, val()?)?),
            "--json" => o.json = true,
            "--threaded" => o.threaded = true,
            "--bench" => {
                o.bench.get_or_insert_with(bench::Args::default);
            }
            "--quick" => o.bench.get_or_insert_with(bench::Args::default).quick = true,
            "--target-cost" => {
                let v = val()?;
                o.bench.get_or_insert_with(bench::Args::default).target_cost = Some(v.into());
            }
            "--readme" => {
                let v = val()?;
                o.bench.get_or_insert_with(bench::Args::default).readme = Some(v.into());
            }
            "-h" | "--help" => return Err(String::new()),
            x => return Err(format!("unknown argument '{x}'")),
        }
    }
    if o.job.depth == 0 || o.job.depth > nvmf::rdma::MAX_QUEUE_DEPTH {
        return Err(format!("--qd: 1 to {}", nvmf::rdma::MAX_QUEUE_DEPTH));
    }
    if o.job.queues == 0 {
        return Err("--queues: at least 1".into());
    }
    if o.threaded && o.addr.is_some() {
        return Err("--threaded is for the embedded mode (no --addr)".into());
    }
    if o.bench.is_some() && o.addr.is_some() {
        return Err("--bench runs embedded only (no --addr)".into());
    }
    Ok(o)
}

fn params(o: &Opts) -> ConnectParams {
    ConnectParams {
        hostnqn: HOSTNQN.into(),
        hostid: *b"nvmf-perf-host01",
        subnqn: o.nqn.clone(),
        // --kato, else Linux's default of 5 s against a remote target; none embedded (its
        // virtual time leaps ahead whenever the devices idle). The admin queue sends Keep
        // Alive every half of it during a run.
        kato: o.kato.unwrap_or(if o.addr.is_some() { 5000 } else { 0 }),
        disable_sqflow: false,
    }
}

/// Runs the job from `ep` against the target at `dst`.
fn host<D: Device>(ep: &Endpoint<D>, dst: SocketAddr, o: &Opts) -> Result<Report, String> {
    let mut s = perf::open_session(
        ep,
        dst,
        &params(o),
        o.job.nsid,
        o.job.queues,
        // At least two entries (HSQSIZE 0 is invalid); `depth` commands in flight.
        o.job.depth.max(2),
        o.job.bs,
    )?;
    let r = perf::run(&mut s, &o.job);
    s.close();
    r
}

/// The embedded run's target.
fn embedded_target(o: &Opts) -> Result<Arc<Target>, String> {
    let mut t = Target::new(TargetConfig {
        mdts: 8,
        ..TargetConfig::default()
    });
    let mut s = Subsystem::new(&o.nqn, "RDMA-STACK-0001", "rdma-stack nvmf-perf");
    s.add_namespace(
        1,
        Arc::new(RamNamespace::new(512, 64 * 2048).ok_or("namespace")?),
    )
    .map_err(|e| format!("namespace: {e:?}"))?;
    t.add_subsystem(s)
        .map_err(|e| format!("subsystem: {e:?}"))?;
    Ok(Arc::new(t))
}

/// Runs `o.job` embedded: host and target in this process on two fresh emulated NICs, from
/// one loop (the default) or with the target's queues on threads of their own (`--threaded`).
fn embedded(o: &Opts) -> Result<Report, String> {
    if o.threaded {
        return embedded_threaded(o);
    }
    // One loop: every wait of the host (its queue's completion polls, the connection
    // manager's waits) polls the target's `PolledTarget` (listener and every queue), then
    // steps both emulated NICs; nothing else runs. Paced as below.
    let (e, poller) = Embedded::one_loop(0x6e76_6d66_7065, 500_000_000, 60_000_000_000)?;
    let dst = SocketAddr::from((EMBEDDED_TARGET_IP, o.port));
    let mut target = PolledTarget::listen(&e.target.cm, dst, embedded_target(o)?, 1 << 20, None)
        .map_err(|e| format!("listen {dst}: {e:?}"))?;
    let clock = e.target.clock.clone();
    poller.set(move || target.poll(nvmf_rdma::now_ms(&clock)));
    let r = host(&e.host, dst, o);
    // The target (its listener and any queue left) goes before the fixture.
    poller.clear();
    r
}

/// [`embedded`] as `nvmf-target` runs: the listener and each target queue on a thread.
fn embedded_threaded(o: &Opts) -> Result<Report, String> {
    // Paced: virtual time runs no faster than real time while the devices idle, so a thread
    // the OS left unscheduled on a loaded machine does not time out its peer. The
    // listener's wait limit is how long it takes to see the end of the run.
    let e = Embedded::paced(0x6e76_6d66_7065, 500_000_000, 60_000_000_000)?;
    let t = embedded_target(o)?;
    let listen = e.target.listen(o.port)?;
    let stop = AtomicBool::new(false);
    let stats = ListenerStats::default();
    let r = std::thread::scope(|sc| {
        sc.spawn(|| run_listener(&t, &listen, &e.target.clock, 1 << 20, &stop, &stats, false));
        let r = host(&e.host, SocketAddr::from((EMBEDDED_TARGET_IP, o.port)), o);
        stop.store(true, Ordering::Relaxed);
        r
    });
    listen.destroy_ep();
    r
}

struct Remote<'a>(&'a Opts, Ipv4Addr);

impl WithDevice for Remote<'_> {
    type Output = Result<Report, String>;
    fn run<D: Device>(self, dev: Opened<D>) -> Result<Report, String> {
        let Remote(o, dst) = self;
        let (ep, backing) = Endpoint::new(dev, 30_000_000_000)?;
        let r = host(&ep, SocketAddr::from((dst, o.port)), o);
        drop(ep);
        drop(backing);
        r
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(m) if m.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(m) => {
            eprintln!("nvmf-perf: {m}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(b) = &o.bench {
        return match bench::run(&o, b) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nvmf-perf: bench: {e}");
                ExitCode::from(1)
            }
        };
    }
    let r = match o.addr {
        None => embedded(&o),
        Some(dst) => open_remote(&o.device, o.src, o.fabric_port, Remote(&o, dst)).and_then(|r| r),
    };
    match r {
        Ok(r) => {
            if o.json {
                println!("{}", r.to_json());
            } else {
                println!("{}", r.to_text());
            }
            if r.errors == 0 && r.mismatches == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("nvmf-perf: {e}");
            ExitCode::from(1)
        }
    }
}

mod bench {
    //! `--bench`: the README's NVMe-oF figure table.

    use std::fmt::Write as _;
    use std::path::PathBuf;
    use std::process::Command;

    use nvmf_rdma::perf::{Job, Pattern, Report};

    use super::{Opts, embedded};

    const BEGIN: &str = "<!-- nvmf-table:begin -->";
    const END: &str = "<!-- nvmf-table:end -->";

    /// What `--bench` was given.
    #[derive(Clone, Debug, Default)]
    pub struct Args {
        /// A tenth of the I/Os (a smoke run).
        pub quick: bool,
        /// The output of `scripts/nvmf-target-cost.sh`.
        pub target_cost: Option<PathBuf>,
        /// Write the table into this file between the markers.
        pub readme: Option<PathBuf>,
    }

    /// The number after `"key":` in a flat JSON object.
    pub fn json_num(line: &str, key: &str) -> Option<f64> {
        let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
        let rest = &line[at..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | 'E' | '+')))
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    }

    /// rperf's embedded 4 KiB RDMA WRITE message rate (Mpps), from the `rperf` binary beside
    /// this one.
    fn rperf_rate(iters: u64) -> Result<f64, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("current_exe: {e}"))?
            .with_file_name("rperf");
        let out = Command::new(&exe)
            .args(["write_bw", "-s", "4096", "-n", &iters.to_string(), "--json"])
            .output()
            .map_err(|e| format!("{}: {e} (cargo build --release -p rperf)", exe.display()))?;
        let line = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        if !out.status.success() || !line.contains("\"data_verified\":true") {
            return Err(format!(
                "{} write_bw: {:?}: {line} {}",
                exe.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        json_num(&line, "msg_rate_mpps").ok_or_else(|| format!("no msg_rate_mpps in {line}"))
    }

    fn job(o: &Opts, pattern: Pattern, depth: u16, count: u64) -> Opts {
        Opts {
            job: Job {
                pattern,
                bs: 4096,
                depth,
                queues: 1,
                count: Some(count),
                time_ms: 0,
                verify: false,
                ..Job::default()
            },
            bench: None,
            nqn: o.nqn.clone(),
            device: o.device.clone(),
            addr: None,
            src: o.src,
            port: o.port,
            fabric_port: o.fabric_port,
            kato: o.kato,
            json: false,
            threaded: o.threaded,
        }
    }

    fn checked(r: Report) -> Result<Report, String> {
        if r.errors != 0 || r.mismatches != 0 {
            return Err(format!(
                "{}: {} errors, {} mismatches",
                r.pattern, r.errors, r.mismatches
            ));
        }
        Ok(r)
    }

    /// The median of `v` by `key` (v has an odd length).
    fn median<T: Clone>(v: &[T], key: impl Fn(&T) -> f64) -> T {
        let mut s: Vec<T> = v.to_vec();
        s.sort_by(|a, b| key(a).total_cmp(&key(b)));
        s[s.len() / 2].clone()
    }

    /// Instructions per I/O from `scripts/nvmf-target-cost.sh`'s output.
    fn target_cost(p: &PathBuf) -> Result<(String, String), String> {
        let t = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let find = |what: &str| {
            t.lines()
                .find_map(|l| l.strip_prefix(what))
                .map(|v| v.trim().to_string())
                .ok_or_else(|| format!("{}: no '{what}' line", p.display()))
        };
        Ok((
            find("target instructions per 4 KiB read:")?,
            find("target instructions per 4 KiB write:")?,
        ))
    }

    /// Measures and prints the table (and writes it into the README).
    pub fn run(o: &Opts, a: &Args) -> Result<(), String> {
        if a.readme.is_some() && cfg!(debug_assertions) {
            return Err("a build with debug assertions does not write figures (--release)".into());
        }
        let (n, n_lat, n_rperf) = if a.quick {
            (5_000, 1_000, 10_000)
        } else {
            (50_000, 10_000, 100_000)
        };
        let cost = a.target_cost.as_ref().map(target_cost).transpose()?;
        let mut rates = Vec::new();
        let (mut reads, mut writes, mut lats) = (Vec::new(), Vec::new(), Vec::new());
        for round in 1..=3 {
            eprintln!("nvmf-perf: bench round {round} of 3");
            rates.push(rperf_rate(n_rperf)?);
            reads.push(checked(embedded(&job(o, Pattern::RandRead, 32, n))?)?);
            writes.push(checked(embedded(&job(o, Pattern::RandWrite, 32, n))?)?);
            lats.push(checked(embedded(&job(o, Pattern::RandRead, 1, n_lat))?)?);
        }
        let rate = median(&rates, |x| *x);
        let read = median(&reads, Report::iops);
        let write = median(&writes, Report::iops);
        let lat = median(&lats, |r| r.lat.p50 as f64);
        let t = table(
            rate,
            &read,
            &write,
            &lat,
            cost.as_ref(),
            a.quick,
            o.threaded,
        );
        print!("{t}");
        if let Some(p) = &a.readme {
            let old = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let (Some(b), Some(e)) = (old.find(BEGIN), old.find(END)) else {
                return Err(format!("{}: no {BEGIN} ... {END} markers", p.display()));
            };
            if e < b {
                return Err(format!("{}: the markers are out of order", p.display()));
            }
            let new = format!("{}{BEGIN}\n{t}{}", &old[..b], &old[e..]);
            std::fs::write(p, new).map_err(|e| format!("{}: {e}", p.display()))?;
            eprintln!("nvmf-perf: wrote the table into {}", p.display());
        }
        Ok(())
    }

    fn cpu() -> String {
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines().find_map(|l| {
                    l.strip_prefix("model name")
                        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
                })
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let n = std::thread::available_parallelism().map_or(0, |n| n.get());
        let load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
            .unwrap_or_else(|| "?".into());
        format!("{model}, {n} CPUs, load average {load} at the end of the run")
    }

    /// The Markdown table.
    pub fn table(
        rate_mpps: f64,
        read: &Report,
        write: &Report,
        lat: &Report,
        cost: Option<&(String, String)>,
        quick: bool,
        threaded: bool,
    ) -> String {
        let mut t = String::new();
        let us = |ns: u64| ns as f64 / 1e3;
        let ratio = |r: &Report| r.iops() / (rate_mpps * 1e6);
        let _ = writeln!(
            t,
            "Written by `bash scripts/nvmf-bench.sh` (`nvmf-perf --bench{}`{}) on {}. Embedded: \
             the target's queue engine (`nvmf-rdma-target`) and `nvmf-perf`'s host in one \
             process, {}, on two emulated ConnectX NICs of one in-process fabric (the mlx5 \
             driver, real RoCEv2 packets), one I/O queue, a 64 MiB RAM namespace, data not \
             verified in the timed runs; rperf in its embedded mode on the same kind of NIC pair \
             and fabric. Each figure is the median of three rounds.",
            match (threaded, quick) {
                (false, false) => "",
                (false, true) => " --quick",
                (true, false) => " --threaded",
                (true, true) => " --threaded --quick",
            },
            if quick { ": a smoke run" } else { "" },
            cpu(),
            if threaded {
                "the target's listener and each of its queues on a thread of its own as in \
                 `nvmf-target`, the host's queue on another"
            } else {
                "host, target (`PolledTarget`: listener and every queue) and both emulated NICs \
                 driven from one loop on one thread, as rperf's embedded mode runs"
            }
        );
        t.push('\n');
        let _ = writeln!(
            t,
            "| figure | value | against rperf's 4 KiB WRITE rate | target |"
        );
        let _ = writeln!(t, "| --- | --- | --- | --- |");
        let _ = writeln!(
            t,
            "| rperf 4 KiB RDMA WRITE message rate (`rperf write_bw -s 4096`) | {:.3} Mpps | 1 | |",
            rate_mpps
        );
        let met = if ratio(read) >= 0.6 {
            "**met**"
        } else {
            "**not met**"
        };
        let _ = writeln!(
            t,
            "| 4 KiB random read, queue depth 32 | {:.0} IOPS ({:.1} MB/s) | {:.2} | ≥ 0.6: {met} |",
            read.iops(),
            read.mbps(),
            ratio(read)
        );
        let _ = writeln!(
            t,
            "| 4 KiB random write (in-capsule data), queue depth 32 | {:.0} IOPS ({:.1} MB/s) | {:.2} | |",
            write.iops(),
            write.mbps(),
            ratio(write)
        );
        let _ = writeln!(
            t,
            "| 4 KiB random read latency, queue depth 1 | median {:.1} µs, p99 {:.1} µs | | |",
            us(lat.lat.p50),
            us(lat.lat.p99)
        );
        if let Some((r, w)) = cost {
            let _ = writeln!(
                t,
                "| target instructions per 4 KiB read / write (callgrind, `scripts/nvmf-target-cost.sh`) | {r} / {w} | | |"
            );
        }
        t
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn json_numbers() {
            let l = r#"{"bw_avg_mb_s":356.288,"msg_rate_mpps":5.7e-3}"#;
            assert_eq!(json_num(l, "msg_rate_mpps"), Some(0.0057));
            assert_eq!(json_num(l, "bw_avg_mb_s"), Some(356.288));
            assert_eq!(json_num(l, "nope"), None);
        }

        #[test]
        fn table_judges_the_read_target() {
            let r = |iops: u64| Report {
                ios: iops,
                elapsed_ns: 1_000_000_000,
                ..Report::default()
            };
            let t = table(0.1, &r(70_000), &r(50_000), &r(1), None, false, false);
            assert!(
                t.contains("| 4 KiB random read, queue depth 32 | 70000 IOPS"),
                "{t}"
            );
            assert!(t.contains("| 0.70 | ≥ 0.6: **met** |"), "{t}");
            let t = table(0.1, &r(50_000), &r(50_000), &r(1), None, false, false);
            assert!(t.contains("| 0.50 | ≥ 0.6: **not met** |"), "{t}");
            assert!(t.contains("(`nvmf-perf --bench`)"), "{t}");
            assert!(t.contains("from one loop on one thread"), "{t}");
            let t = table(0.1, &r(50_000), &r(50_000), &r(1), None, true, true);
            assert!(
                t.contains("(`nvmf-perf --bench --threaded --quick`: a smoke run)"),
                "{t}"
            );
            assert!(
                t.contains("each of its queues on a thread of its own"),
                "{t}"
            );
        }

        #[test]
        fn median_of_three() {
            assert_eq!(median(&[3.0, 1.0, 2.0], |x| *x), 2.0);
        }
    }
}
