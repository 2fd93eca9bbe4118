//! `rperf`: a perftest-style bandwidth and latency benchmark for the kernel-bypass RDMA stack.
//!
//! Two modes:
//! - EMBEDDED (the default): both ends in this process, each on its own emulated
//!   ConnectX-class NIC driven by the mlx5 driver through the verbs provider trait, the two
//!   NICs joined by the in-process RoCEv2 fabric and their RC QPs connected by hand. The fabric
//!   is a discrete-event simulation stepped by the poll loops, so the figures are the
//!   wall-clock cost of driver + emulated device + wire encoding on this CPU (measured with
//!   [`std::time::Instant`]), not of a network: they compare versions of the stack, not NICs.
//! - SERVER (`--server`) and CLIENT (`PEER`): one end per process, each on its own NIC (an
//!   emulated one on the UDP fabric, or a real one through VFIO with `--device vfio:BDF`),
//!   connected through the connection manager ([`remote`]).
//!
//! ```text
//! rperf                          # the default suite
//! rperf write_bw -s 4096 -n 5000 # one test at one size
//! rperf send_lat -a --json       # every size from 2 B to 8 MiB, JSON Lines
//! rperf read_lat --plot lat.svg  # with a latency histogram
//! rperf write_bw --server        # one side (NIC at 127.0.0.2) ...
//! rperf write_bw 127.0.0.2       # ... and the other (NIC at 127.0.0.1)
//! ```
//!
//! Output follows perftest: a banner, then `#bytes #iterations BW peak[MB/sec] BW
//! average[MB/sec] MsgRate[Mpps]` (MB = 2^20 bytes) or `#bytes #iterations t_min[usec] ...
//! 99.9% percentile[usec]`, then `data verified: yes` once what arrived was compared with what
//! was sent. Table figures have perftest's decimals (three significant digits where those would
//! show a positive figure as zero); `--json` prints them at full precision. Exit status: 0 ok, 1 run failure (a device that cannot be attached, a peer that
//! does not answer) or data mismatch, 2 bad command line.

mod bw;
mod cli;
mod lat;
mod perftest;
mod plot;
mod port;
mod progress;
mod remote;
mod report;
mod serve;
mod setup;
mod stats;

use std::io::Write;
use std::path::{Path, PathBuf};

use cli::{Command, Mode, Options, Test};
use device_open::{Device, WithDevice};
use progress::Progress;
use remote::{Local, Net, Outcome};
use report::{BannerInfo, RunInfo, Side};

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

type BoxError = Box<dyn std::error::Error>;

/// Runs what `o` asks for; `Ok(false)` when some data did not verify.
fn run(o: &Options) -> Result<bool, BoxError> {
    if o.mode() == Mode::Embedded {
        #[cfg(feature = "emulator")]
        return run_tests(o, &mut embedded::Embedded);
        #[cfg(not(feature = "emulator"))]
        return Err(
            "the embedded mode runs on emulated NICs: this rperf was built without \
                    the `emulator` feature (use --server or PEER with --device vfio:BDF)"
                .into(),
        );
    }
    let net = o.net();
    if let Some((l, r)) = o.eth {
        #[cfg(feature = "emulator")]
        return run_eth(o, &net, l, r);
        #[cfg(not(feature = "emulator"))]
        return Err(format!(
            "--fabric eth:{l},{r} is the emulated NIC's: this rperf was built without the \
             `emulator` feature"
        )
        .into());
    }
    device_open::open_remote(
        &o.family(),
        net.local,
        net.fabric_port,
        Remote { o, net: &net },
    )?
}

/// The two-process mode on this process's device, whatever its type.
struct Remote<'a> {
    o: &'a Options,
    net: &'a Net,
}

impl WithDevice for Remote<'_> {
    type Output = Result<bool, BoxError>;

    fn run<D: Device>(self, dev: device_open::Opened<D>) -> Self::Output {
        let device_open::Opened {
            dev,
            mac,
            ip,
            label,
            clock,
            backing,
        } = dev;
        let local = Local::new(dev, ip, mac, clock, label, self.net)?;
        let r = run_remote(self.o, self.net, &local);
        // The manager (and the device in it) before what keeps the device alive.
        drop(local);
        drop(backing);
        r
    }
}

/// The two-process mode on an emulated NIC on an Ethernet link (`--fabric eth:L,R`): a
/// client first resolves its peer by ARP.
#[cfg(feature = "emulator")]
fn run_eth(o: &Options, net: &Net, l: u16, r: u16) -> Result<bool, BoxError> {
    let ip = net.local;
    let nic = device_open::fabric::eth_nic(ip, l, r, None, net.cm_config())?;
    let res = (|| -> Result<bool, BoxError> {
        if let Mode::Client(peer) = o.mode() {
            device_open::fabric::resolve(&nic, peer, net.timeout)?;
        }
        let label = format!(
            "emulated mlx5 at {ip} on the Ethernet link 127.0.0.1:{l} -> 127.0.0.1:{r} (MAC {})",
            device_open::fabric::fmt_mac(&nic.mac())
        );
        let local = Local::on_cm(nic.cm.clone(), nic.dev_id, ip, label)?;
        run_remote(o, net, &local)
    })();
    match nic.shutdown() {
        Ok(live) if live == Default::default() => {}
        Ok(live) => eprintln!("rperf: device objects left at shutdown: {live:?}"),
        Err(e) => eprintln!("rperf: shutdown: {e}"),
    }
    res
}

fn run_remote<D: Device>(o: &Options, net: &Net, local: &Local<D>) -> Result<bool, BoxError> {
    if o.perftest {
        return run_perftest(o, net, local);
    }
    match o.mode() {
        Mode::Client(peer) => run_tests(
            o,
            &mut Client {
                local,
                net,
                peer,
                device: &local.label,
            },
        ),
        _ => serve(o, net, local),
    }
}

/// perftest's rdma_cm exchange (`-R`): one run as the client or the server.
fn run_perftest<D: Device>(o: &Options, net: &Net, local: &Local<D>) -> Result<bool, BoxError> {
    let test = o.test.ok_or("-R needs a test")?;
    if net.srd {
        return Err(
            "-R (perftest's rdma_cm exchange) needs RC QPs, which an EFA does not have: \
                    run rperf's own exchange (without -R) on --device efa"
                .into(),
        );
    }
    let p = perftest::Params {
        test,
        size: o.sizes(test)[0],
        iters: o.plan().count(),
        tx_depth: o.tx_depth(),
    };
    let (role, ran) = match o.mode() {
        Mode::Client(peer) => ("CLIENT", perftest::client(local, net, peer, p)?),
        _ => {
            let listener = perftest::listen(local, net)?;
            eprintln!(
                "rperf: server (perftest -R): listening on {}:{} ({})",
                local.ip, net.port, local.label
            );
            let r = perftest::server(local, &listener, net, p);
            listener.destroy_ep();
            ("SERVER", r?)
        }
    };
    let mut out = std::io::stdout().lock();
    let peer = ran.peer_addr.map_or_else(|| "?".into(), |a| a.to_string());
    writeln!(out, "{}", report::RULE)?;
    writeln!(
        out,
        "                    {} (perftest's rdma_cm exchange, -R)",
        test.title()
    )?;
    writeln!(
        out,
        " {role} of a perftest exchange with {peer} (perftest {} there; this end speaks {})",
        ran.peer_version,
        perftest::VERSION
    )?;
    writeln!(
        out,
        " Device: {}, message size {} B, {} iterations",
        local.label, p.size, p.iters
    )?;
    for (who, d) in [("local", &ran.me), ("remote", &ran.peer)] {
        writeln!(
            out,
            " {who:<6} address: QPN {:#08x} OUT {:#04x} RKey {:#010x} VAddr {:#018x} GID {}",
            d.qpn,
            d.out_reads,
            d.rkey,
            d.vaddr,
            report::gid(&verbs::Gid(d.gid))
        )?;
    }
    writeln!(out, "{}", report::RULE)?;
    match &ran.figures {
        perftest::Figures::Lat(samples) => {
            writeln!(out, "{}", report::header(test))?;
            match perftest::lat_figures(samples) {
                Some(st) => writeln!(out, "{}", report::lat_row(p.size, samples.len(), &st))?,
                None => writeln!(out, " (no round trip timed at this end)")?,
            }
        }
        perftest::Figures::Bw(r) => {
            writeln!(out, "{}", report::header(test))?;
            writeln!(
                out,
                "{}",
                report::bw_row(p.size, r.iters as usize, &r.stats())
            )?;
        }
        perftest::Figures::Reported(r) => {
            writeln!(out, " the client's figures:")?;
            writeln!(out, "{}", report::header(test))?;
            writeln!(
                out,
                "{}",
                report::bw_row(r.size as usize, r.iters as usize, &r.stats())
            )?;
        }
        perftest::Figures::None => writeln!(out, " (the client measures this test)")?,
    }
    writeln!(out, "{}", report::RULE)?;
    out.flush()?;
    Ok(true)
}

/// The server: connections until the client's last one; the `-q` connections of one run
/// are served concurrently, one thread each.
fn serve<D: Device>(o: &Options, net: &Net, local: &Local<D>) -> Result<bool, BoxError> {
    if let Some(t) = o.test {
        local.can_run(t)?;
    }
    let listener = remote::listen(local, net)?;
    // On stderr, so that stdout stays the results (JSON Lines with --json).
    eprintln!(
        "rperf: server: listening on {}:{} (fabric UDP port {})",
        local.ip, net.port, net.fabric_port
    );
    let mut all_ok = true;
    let r = (|| -> Result<(), BoxError> {
        loop {
            let s = remote::serve_group(local, &listener, o.test, net)?;
            let peer = s.peer.map_or_else(|| "?".to_string(), |p| p.to_string());
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{}",
                report::served(s.req.test, s.req.size, s.count, &peer, &s.verified, o.json)
            )?;
            out.flush()?;
            all_ok &= s.verified.is_ok();
            if s.req.last {
                return Ok(());
            }
        }
    })();
    listener.destroy_ep();
    r?;
    Ok(all_ok)
}

/// Runs one test at one size somewhere: prints the banner (first size) once connected.
trait Exec {
    /// The JSON mode name.
    fn mode(&self) -> &'static str;
    /// Runs `test` at `size`.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        o: &Options,
        test: Test,
        size: usize,
        last: bool,
        banner: bool,
        progress: &mut Progress,
    ) -> Result<(RunInfo, Outcome), BoxError>;
}

/// What the banner and JSON say of a run of `test`.
fn run_info(o: &Options, test: Test, rd_atomic: u8, mtu: u32, mode: &'static str) -> RunInfo {
    RunInfo {
        test,
        tx_depth: if test.is_lat() { 1 } else { o.tx_depth() },
        cq_mod: o.cq_mod(),
        inline: o.inline(test),
        rd_atomic,
        mtu,
        qps: o.qps(),
        mode,
    }
}

/// The first error of `runs`' verdicts, with the lane it came from when there are several.
fn merge_verdicts<'a>(
    verdicts: impl Iterator<Item = &'a std::result::Result<(), String>>,
    lanes: usize,
) -> std::result::Result<(), String> {
    for (k, v) in verdicts.enumerate() {
        if let Err(e) = v {
            return Err(if lanes > 1 {
                format!("QP {k}: {e}")
            } else {
                e.clone()
            });
        }
    }
    Ok(())
}

/// One result from the results of the lanes of a `-q` run: latency samples merged,
/// bandwidth runs side by side (their figures are summed).
fn merge_outcomes(outs: Vec<Outcome>) -> Result<Outcome, BoxError> {
    let n = outs.len();
    let mut lat: Vec<lat::LatRun> = Vec::new();
    let mut bw: Vec<bw::BwRun> = Vec::new();
    for out in outs {
        match out {
            Outcome::Lat(r) => lat.push(r),
            Outcome::Bw(mut r) => bw.append(&mut r),
        }
    }
    if !lat.is_empty() {
        let verified = merge_verdicts(lat.iter().map(|r| &r.verified), n);
        let size = lat[0].size;
        let samples_us = lat.into_iter().flat_map(|r| r.samples_us).collect();
        return Ok(Outcome::Lat(lat::LatRun {
            size,
            samples_us,
            verified,
        }));
    }
    if bw.is_empty() {
        return Err("no QP ran".into());
    }
    Ok(Outcome::Bw(bw))
}

#[cfg(feature = "emulator")]
mod embedded {
    //! The embedded mode's [`Exec`]: both ends here, `-q` lanes on threads of their own.

    use super::*;
    use setup::{Pair, QpConfig};

    /// Both ends here.
    pub struct Embedded;

    impl Exec for Embedded {
        fn mode(&self) -> &'static str {
            "embedded"
        }

        fn run(
            &mut self,
            o: &Options,
            test: Test,
            size: usize,
            _last: bool,
            banner: bool,
            progress: &mut Progress,
        ) -> Result<(RunInfo, Outcome), BoxError> {
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
            // A fresh pair of NICs for each size (bring-up takes well under a millisecond): no
            // receive, counter or buffer layout carries over from the previous size.
            let (region, lanes) = (remote::region_for(test, size), o.qps() as usize);
            let run = Run {
                o,
                test,
                size,
                banner,
                mode: self.mode(),
            };
            if matches!(o.family(), device_open::Family::Efa(_)) {
                run.on(Pair::new_efa(region, &qp, lanes)?, "emulated EFA", progress)
            } else {
                run.on(Pair::new(region, &qp, lanes)?, "emulated mlx5", progress)
            }
        }
    }

    /// One size of one test on a [`Pair`] of either family.
    struct Run<'a> {
        o: &'a Options,
        test: Test,
        size: usize,
        banner: bool,
        mode: &'static str,
    }

    impl Run<'_> {
        fn on<D: device_open::Device>(
            self,
            mut pair: Pair<D>,
            device: &str,
            progress: &mut Progress,
        ) -> Result<(RunInfo, Outcome), BoxError> {
            let Run {
                o,
                test,
                size,
                banner,
                mode,
            } = self;
            let plan: cli::Plan = o.plan();
            // The inline amount the QPs took (on EFA at most the device's).
            let inline = pair.inline;
            let info = RunInfo {
                inline,
                ..run_info(o, test, pair.rd_atomic, pair.mtu.bytes(), mode)
            };
            if banner {
                use verbs::MemoryRegion;
                let side = |e: &setup::End<D>| Side {
                    qpn: Some(e.qpn()),
                    psn: Some(e.psn),
                    rkey: e.mr.rkey(),
                    vaddr: e.buf.mem.addr(),
                    gid: e.nic.gid,
                };
                let (c, s) = pair.lane0();
                let bi = BannerInfo {
                    mode: "EMBEDDED (both ends in this process, two emulated NICs)",
                    device,
                    fw: pair.fw,
                    local: side(c),
                    remote: side(s),
                    srd: matches!(o.family(), device_open::Family::Efa(_)),
                };
                emit(progress, &report::banner(&info, &bi))?;
                emit(progress, &report::header(test))?;
            }
            let cfg = bw::BwConfig::new(o.tx_depth(), o.cq_mod(), inline);
            let out = if o.qps() == 1 {
                if test.is_lat() {
                    Outcome::Lat(lat::run(&mut pair, test, size, plan, inline, progress)?)
                } else {
                    Outcome::Bw(vec![bw::run(&mut pair, test, size, plan, cfg, progress)?])
                }
            } else {
                merge_outcomes(lanes(&mut pair, test, size, plan, cfg)?)?
            };
            pair.teardown()?;
            Ok((info, out))
        }
    }

    /// Runs every lane of `pair` on a thread of its own: each posts and polls its own QPs
    /// and CQs, and runs the world in its waits (the devices progress whichever thread
    /// steps them).
    fn lanes<D: device_open::Device>(
        pair: &mut Pair<D>,
        test: Test,
        size: usize,
        plan: cli::Plan,
        cfg: bw::BwConfig,
    ) -> Result<Vec<Outcome>, BoxError> {
        let Pair { world, lanes, .. } = pair;
        let world: &nic_testbed::World = world;
        let use_inline = test.inline_at(cfg.inline, size);
        let rx_depth = if test.is_lat() {
            lat::LAT_RQ
        } else {
            cfg.rx_depth
        };
        let results: Vec<setup::Result<Outcome>> = std::thread::scope(|sc| {
            let hs: Vec<_> = lanes
                .iter_mut()
                .map(|(c, s)| {
                    sc.spawn(move || -> setup::Result<Outcome> {
                        let mut quiet = Progress::with_terminal(vec![1.0], false);
                        let (c, mut near, world) = setup::split_lane(
                            c,
                            s,
                            world,
                            test,
                            size,
                            use_inline,
                            rx_depth,
                            plan.count(),
                        )?;
                        Ok(if test.is_lat() {
                            Outcome::Lat(lat::measure(
                                c, &mut near, world, test, size, plan, use_inline, &mut quiet,
                            )?)
                        } else {
                            Outcome::Bw(vec![bw::measure(
                                c, &mut near, world, test, size, plan, cfg, &mut quiet,
                            )?])
                        })
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(setup::Error::Check("a QP's thread panicked".into()))
                    })
                })
                .collect()
        });
        results
            .into_iter()
            .enumerate()
            .map(|(k, r)| r.map_err(|e| format!("QP {k}: {e}").into()))
            .collect()
    }
}

/// The client end of a server in another process.
struct Client<'a, D: Device> {
    local: &'a Local<D>,
    net: &'a Net,
    peer: std::net::Ipv4Addr,
    device: &'a str,
}

impl<D: Device> Exec for Client<'_, D> {
    fn mode(&self) -> &'static str {
        "client"
    }

    fn run(
        &mut self,
        o: &Options,
        test: Test,
        size: usize,
        last: bool,
        banner: bool,
        progress: &mut Progress,
    ) -> Result<(RunInfo, Outcome), BoxError> {
        self.local.can_run(test)?;
        // On EFA at most the device's inline amount.
        let inline = self.local.inline(o.inline(test), self.net);
        let info = RunInfo {
            inline,
            ..run_info(o, test, setup::MAX_RD_ATOMIC, self.local.mtu, self.mode())
        };
        let qps = o.qps();
        let run = remote::ClientRun {
            test,
            size,
            plan: o.plan(),
            cfg: bw::BwConfig::new(o.tx_depth(), o.cq_mod(), inline),
            last,
            qps,
            lane: 0,
        };
        let mode = format!(
            "CLIENT of {}:{} (this NIC {}), through the connection manager",
            self.peer, self.net.port, self.local.ip
        );
        let (fw, local_gid, peer_gid) = (
            self.local.fw,
            verbs::Gid::from_ipv4(self.local.ip.octets()),
            verbs::Gid::from_ipv4(self.peer.octets()),
        );
        let (device, srd) = (self.device, self.net.srd);
        let on_connected = |a: &remote::Addresses| -> std::io::Result<()> {
            if !banner {
                return Ok(());
            }
            let bi = BannerInfo {
                mode: &mode,
                device,
                fw,
                local: Side {
                    qpn: Some(a.local.0),
                    psn: None,
                    rkey: a.local.1,
                    vaddr: a.local.2,
                    gid: local_gid,
                },
                remote: Side {
                    qpn: None,
                    psn: None,
                    rkey: a.remote.0,
                    vaddr: a.remote.1,
                    gid: peer_gid,
                },
                srd,
            };
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", report::banner(&info, &bi))?;
            writeln!(out, "{}", report::header(test))?;
            out.flush()
        };
        let (local, net, peer) = (self.local, self.net, self.peer);
        if qps == 1 {
            let out = remote::client(local, net, peer, run, progress, &mut { on_connected })?;
            return Ok((info, out));
        }
        // One connection per thread; the first prints the banner.
        let results: Vec<Result<Outcome, String>> = std::thread::scope(|sc| {
            let on_connected = &on_connected;
            let hs: Vec<_> = (0..qps)
                .map(|lane| {
                    sc.spawn(move || {
                        let mut quiet = Progress::with_terminal(vec![1.0], false);
                        let mut banner = |a: &remote::Addresses| {
                            if lane == 0 { on_connected(a) } else { Ok(()) }
                        };
                        let run = remote::ClientRun { lane, ..run };
                        remote::client(local, net, peer, run, &mut quiet, &mut banner)
                            .map_err(|e| format!("QP {lane}: {e}"))
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a QP's thread panicked".into()))
                })
                .collect()
        });
        let outs = results.into_iter().collect::<Result<Vec<_>, String>>()?;
        Ok((info, merge_outcomes(outs)?))
    }
}

/// Runs the tests `o` asks for on `exec`.
fn run_tests(o: &Options, exec: &mut dyn Exec) -> Result<bool, BoxError> {
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
        let last_test = k + 1 == tests.len();
        all_ok &= run_test(
            o,
            *test,
            sizes,
            plot.as_deref(),
            &mut progress,
            exec,
            last_test,
        )?;
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

/// One test over its sizes, each size on a fresh connection.
fn run_test(
    o: &Options,
    test: Test,
    sizes: &[usize],
    plot: Option<&Path>,
    progress: &mut Progress,
    exec: &mut dyn Exec,
    last_test: bool,
) -> Result<bool, BoxError> {
    let mut all_ok = true;
    let mut first_error: Option<String> = None;
    let mut lat_runs = Vec::new();
    let mut bw_runs = Vec::new();
    for (k, &size) in sizes.iter().enumerate() {
        progress.begin(format!("{} {}", test.name(), plot::size_label(size)));
        let last = last_test && k + 1 == sizes.len();
        let (info, out) = exec.run(o, test, size, last, k == 0 && !o.json, progress)?;
        let (line, verified) = match out {
            Outcome::Lat(r) => {
                let st = stats::lat_stats(&r.samples_us).ok_or("no latency samples")?;
                let n = r.samples_us.len();
                let line = if o.json {
                    report::lat_json(&info, size, n, &st, &r.verified)
                } else {
                    report::lat_row(size, n, &st)
                };
                let v = r.verified.clone();
                lat_runs.push((r, st));
                (line, v)
            }
            Outcome::Bw(runs) => {
                // Several QPs: their figures add up (each ran the whole time).
                let mut st = stats::BwStats {
                    peak_mbs: 0.0,
                    avg_mbs: 0.0,
                    msg_rate_mpps: 0.0,
                };
                let mut n = 0;
                for r in &runs {
                    let s = stats::bw_stats(size, &r.posted, &r.completed)
                        .ok_or("no bandwidth samples")?;
                    st.peak_mbs += s.peak_mbs;
                    st.avg_mbs += s.avg_mbs;
                    st.msg_rate_mpps += s.msg_rate_mpps;
                    n += r.completed.len();
                }
                let verified = merge_verdicts(runs.iter().map(|r| &r.verified), runs.len());
                bw_runs.push((size, st));
                let line = if o.json {
                    report::bw_json(&info, size, n, &st, &verified)
                } else {
                    report::bw_row(size, n, &st)
                };
                (line, verified)
            }
        };
        emit(progress, &line)?;
        if let Err(e) = &verified {
            all_ok = false;
            first_error.get_or_insert_with(|| format!("{size} B: {e}"));
        }
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
