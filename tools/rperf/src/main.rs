//! `rperf`: a perftest-style bandwidth and latency benchmark for the kernel-bypass RDMA stack.
//!
//! Today it runs in EMBEDDED mode only: both ends in this process, each on its own emulated
//! ConnectX-class NIC driven by the mlx5 driver through the verbs provider trait, the two NICs
//! joined by the in-process RoCEv2 fabric and their RC QPs connected by hand. The fabric is a
//! discrete-event simulation stepped by the poll loops, so the figures are the wall-clock cost
//! of driver + emulated device + wire encoding on this CPU (measured with
//! [`std::time::Instant`]), not of a network: they compare versions of the stack, not NICs.
//! Server mode, a peer address and a VFIO device are parsed but refused (exit status 2) until
//! the connection manager (issue 4) and the VFIO provider (issue 6) exist.
//!
//! ```text
//! rperf                          # the default suite
//! rperf write_bw -s 4096 -n 5000 # one test at one size
//! rperf send_lat -a --json       # every size from 2 B to 8 MiB, JSON Lines
//! rperf read_lat --plot lat.svg  # with a latency histogram
//! ```
//!
//! Output follows perftest: a banner, then `#bytes #iterations BW peak[MB/sec] BW
//! average[MB/sec] MsgRate[Mpps]` (MB = 2^20 bytes) or `#bytes #iterations t_min[usec] ...
//! 99.9% percentile[usec]`, then `data verified: yes` once what arrived was compared with what
//! was sent. Exit status: 0 ok, 1 run failure or data mismatch, 2 bad command line or
//! unsupported mode.

mod bw;
mod cli;
mod lat;
mod plot;
mod progress;
mod report;
mod setup;
mod stats;

use std::io::Write;
use std::path::{Path, PathBuf};

use cli::{Command, Options, Plan, Test};
use progress::Progress;
use report::RunInfo;
use setup::{Pair, QpConfig};

fn main() {
    std::process::exit(real_main());
}

fn real_main() -> i32 {
    match cli::parse(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            print!("{}", cli::usage());
            0
        }
        Ok(Command::Version) => {
            println!("rperf {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Err(e) => {
            eprintln!("rperf: {e}");
            2
        }
        Ok(Command::Run(o)) => match run(&o) {
            Ok(true) => 0,
            Ok(false) => 1,
            // The reader went away (`rperf | head`): stop quietly, as other tools do.
            Err(e)
                if e.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
            {
                0
            }
            Err(e) => {
                eprintln!("rperf: error: {e}");
                1
            }
        },
    }
}

/// Runs what `o` asks for; `Ok(false)` when some data did not verify.
fn run(o: &Options) -> Result<bool, Box<dyn std::error::Error>> {
    let tests: Vec<(Test, Vec<usize>)> = match o.test {
        Some(t) => vec![(t, o.sizes(t))],
        None => Test::SUITE.iter().map(|&(t, s)| (t, vec![s])).collect(),
    };
    // Time per size grows with the bytes moved, plus a per-message cost.
    let weights = tests
        .iter()
        .flat_map(|(_, sizes)| sizes.iter().map(|&z| z as f64 + 4096.0))
        .collect();
    let mut progress = Progress::new(weights);
    let mut all_ok = true;
    for (k, (test, sizes)) in tests.iter().enumerate() {
        if k > 0 && !o.json {
            emit(&mut progress, "")?;
        }
        let plot = o.plot.as_ref().map(|p| {
            if o.test.is_none() {
                suffixed(p, test.name())
            } else {
                p.clone()
            }
        });
        all_ok &= run_test(o, *test, sizes, plot.as_deref(), &mut progress)?;
    }
    Ok(all_ok)
}

/// `dir/name.svg` -> `dir/name-<test>.svg` (one plot per test of the suite).
fn suffixed(p: &Path, test: &str) -> PathBuf {
    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("rperf");
    let ext = p.extension().and_then(|s| s.to_str()).unwrap_or("svg");
    p.with_file_name(format!("{stem}-{test}.{ext}"))
}

/// Prints a line of results on stdout (clearing the progress bar first) and flushes it, so
/// that `-a` runs show each size as it finishes.
fn emit(progress: &mut Progress, line: &str) -> std::io::Result<()> {
    progress.clear();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

/// One test over its sizes, each size on a freshly connected pair of NICs.
fn run_test(
    o: &Options,
    test: Test,
    sizes: &[usize],
    plot: Option<&Path>,
    progress: &mut Progress,
) -> Result<bool, Box<dyn std::error::Error>> {
    let plan: Plan = o.plan();
    let inline = o.inline(test);
    let qp = QpConfig {
        sq: if test.is_lat() {
            lat::LAT_SQ
        } else {
            o.tx_depth()
        },
        rq: match test {
            Test::SendLat => lat::LAT_RQ,
            Test::SendBw => bw::RX_DEPTH.max(o.tx_depth()),
            _ => 1,
        },
        inline,
        mtu: o.mtu,
    };
    // Bytes of SRC (and of DST) each NIC needs for `size`-byte messages.
    let region = |size: usize| {
        if test.is_lat() {
            size.max(8)
        } else {
            bw::slots(size) * size
        }
    };
    let info_for = |pair: &Pair| RunInfo {
        test,
        tx_depth: if test.is_lat() { 1 } else { o.tx_depth() },
        cq_mod: o.cq_mod(),
        inline,
        rd_atomic: pair.rd_atomic,
        mtu: pair.mtu.bytes(),
    };
    let mut all_ok = true;
    let mut first_error: Option<String> = None;
    let mut lat_runs = Vec::new();
    let mut bw_runs = Vec::new();
    for (k, &size) in sizes.iter().enumerate() {
        progress.begin(format!("{} {}", test.name(), plot::size_label(size)));
        // A fresh pair of NICs for each size (bring-up takes well under a millisecond): no
        // receive, counter or buffer layout carries over from the previous size.
        let mut pair = Pair::new(region(size), &qp)?;
        if k == 0 && !o.json {
            emit(progress, &report::banner(&info_for(&pair), &pair))?;
            emit(progress, &report::header(test))?;
        }
        let info = info_for(&pair);
        if test.is_lat() {
            let r = lat::run(&mut pair, test, size, plan, inline, progress)?;
            let st = stats::lat_stats(&r.samples_us).ok_or("no latency samples")?;
            let n = r.samples_us.len();
            emit(
                progress,
                &if o.json {
                    report::lat_json(&info, size, n, &st, &r.verified)
                } else {
                    report::lat_row(size, n, &st)
                },
            )?;
            if let Err(e) = &r.verified {
                all_ok = false;
                first_error.get_or_insert_with(|| format!("{size} B: {e}"));
            }
            lat_runs.push((r, st));
        } else {
            let cfg = bw::BwConfig {
                tx_depth: o.tx_depth(),
                cq_mod: o.cq_mod(),
                inline,
                rx_depth: bw::RX_DEPTH.max(o.tx_depth()),
            };
            let r = bw::run(&mut pair, test, size, plan, cfg, progress)?;
            let st =
                stats::bw_stats(size, &r.posted, &r.completed).ok_or("no bandwidth samples")?;
            let n = r.completed.len();
            emit(
                progress,
                &if o.json {
                    report::bw_json(&info, size, n, &st, &r.verified)
                } else {
                    report::bw_row(size, n, &st)
                },
            )?;
            if let Err(e) = &r.verified {
                all_ok = false;
                first_error.get_or_insert_with(|| format!("{size} B: {e}"));
            }
            bw_runs.push((size, st));
        }
        pair.teardown()?;
        progress.end_unit();
    }
    let verdict = match &first_error {
        None => "data verified: yes".to_string(),
        Some(e) => format!("data verified: no ({e})"),
    };
    progress.clear();
    if o.json {
        // stdout stays pure JSON Lines; the verdict goes to stderr.
        eprintln!("{}: {verdict}", test.name());
    } else {
        emit(progress, report::RULE)?;
        emit(progress, &verdict)?;
    }
    if let Some(path) = plot {
        let svg = if test.is_lat() {
            let series: Vec<plot::LatSeries<'_>> = lat_runs
                .iter()
                .map(|(r, st)| plot::LatSeries {
                    size: r.size,
                    samples: &r.samples_us,
                    stats: *st,
                })
                .collect();
            plot::latency_histograms(test.name(), &series)
        } else {
            plot::bandwidth_vs_size(test.name(), &bw_runs)
        };
        std::fs::write(path, svg)
            .map_err(|e| format!("write the plot to {}: {e}", path.display()))?;
        if !o.json {
            emit(progress, &format!("plot written to {}", path.display()))?;
        }
    }
    Ok(all_ok)
}
