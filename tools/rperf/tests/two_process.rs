//! The two-process mode: `rperf --server` in one process, `rperf PEER` in another, each with
//! its own emulated NIC on the UDP fabric, connected through the connection manager. Every
//! test runs a few iterations; both ends' results must parse and say the data verified.
//!
//! Addresses: 127.0.7.0/24; fabric UDP ports 47000-47049, one per test function, so the tests
//! of this binary run in parallel without meeting.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

const EXE: &str = env!("CARGO_BIN_EXE_rperf");
/// A test fails rather than hangs: each process gets this long.
const LIMIT: Duration = Duration::from_secs(60);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Starts `rperf ARGS MORE --bind IP --fabric-port PORT --timeout 20` with its output piped.
fn spawn(args: &[&str], more: &[&str], ip: &str, port: u16) -> Child {
    let port = port.to_string();
    Command::new(EXE)
        .args(args)
        .args(more)
        .args(["--bind", ip, "--fabric-port", &port, "--timeout", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rperf")
}

/// A server process that announced it is listening.
struct Server {
    child: Child,
    /// stderr lines after the announcement.
    err_rx: mpsc::Receiver<String>,
}

/// Starts `rperf ARGS --server --bind IP --fabric-port PORT` and waits for its "listening" line.
fn server(args: &[&str], ip: &str, port: u16) -> Server {
    let mut child = spawn(args, &["--server"], ip, port);
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + LIMIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains("listening on") => break,
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("server output");
                panic!(
                    "the server did not start listening: {:?}\n{}",
                    out.status,
                    text(&out.stdout)
                );
            }
        }
    }
    Server { child, err_rx: rx }
}

impl Server {
    /// Waits for the server to exit (killing it after [`LIMIT`]): status, stdout, stderr.
    fn finish(mut self) -> (Option<i32>, String, String) {
        let deadline = Instant::now() + LIMIT;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the server did not exit");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            o.read_to_string(&mut out).expect("server stdout");
        }
        let err: Vec<String> = self.err_rx.try_iter().collect();
        (status.code(), out, err.join("\n"))
    }
}

/// Runs the client `rperf ARGS PEER --bind IP --fabric-port PORT`.
fn client(args: &[&str], peer: &str, ip: &str, port: u16) -> Output {
    let mut child = spawn(args, &[peer], ip, port);
    let deadline = Instant::now() + LIMIT;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the client did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("client output")
}

/// A server with `sargs` at `sip` and a client with `cargs` from `cip`, both required to
/// succeed; the client's stdout and stderr, and the server's stdout.
fn run_pair(
    sargs: &[&str],
    cargs: &[&str],
    (sip, cip, port): (&str, &str, u16),
) -> (String, String, String) {
    let srv = server(sargs, sip, port);
    let out = client(cargs, sip, cip, port);
    let (code, sout, serr) = srv.finish();
    let (cout, cerr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{cargs:?}: client {:?}\n{cout}\n{cerr}\nserver:\n{sout}\n{serr}",
        out.status
    );
    assert_eq!(code, Some(0), "{sargs:?}: server\n{sout}\n{serr}");
    (cout, cerr, sout)
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

#[test]
fn every_test_as_two_processes_json() {
    let (sip, cip, port) = ("127.0.7.2", "127.0.7.1", 47_000);
    for t in [
        "send_lat",
        "write_lat",
        "read_lat",
        "atomic_lat",
        "send_bw",
        "write_bw",
        "read_bw",
    ] {
        let size = if t == "atomic_lat" { "8" } else { "200" };
        let mut args = vec![t, "-n", "40", "-s", size, "--json"];
        if t.ends_with("_bw") {
            args.extend(["-t", "16"]);
        }
        let (cout, cerr, sout) = run_pair(&[t, "--json"], &args, (sip, cip, port));
        let c = json_lines(&cout);
        assert_eq!(c.len(), 1, "{t}: {cout}");
        let v = &c[0];
        assert_eq!(v["test"], t, "{v}");
        assert_eq!(v["mode"], "client", "{v}");
        assert_eq!(v["bytes"].as_u64(), Some(size.parse().unwrap()), "{v}");
        assert_eq!(v["iterations"].as_u64(), Some(40), "{v}");
        assert_eq!(v["data_verified"], true, "{v}");
        let key = if t.ends_with("_lat") {
            "t_typical_usec"
        } else {
            "bw_avg_mb_s"
        };
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{t}: {v}");
        assert!(cerr.contains(&format!("{t}: data verified: yes")), "{cerr}");
        let s = json_lines(&sout);
        assert_eq!(s.len(), 1, "{t}: {sout}");
        assert_eq!(s[0]["mode"], "server", "{}", s[0]);
        assert_eq!(s[0]["test"], t, "{}", s[0]);
        assert_eq!(s[0]["iterations"].as_u64(), Some(40), "{}", s[0]);
        assert_eq!(s[0]["data_verified"], true, "{}", s[0]);
        assert!(
            s[0]["peer"].as_str().is_some_and(|p| p.starts_with(cip)),
            "{}",
            s[0]
        );
    }
}

#[test]
fn the_suite_as_two_processes_with_tables() {
    let (sip, cip, port) = ("127.0.7.4", "127.0.7.3", 47_001);
    let srv = server(&[], sip, port);
    let out = client(&["-n", "5"], sip, cip, port);
    let (code, sout, serr) = srv.finish();
    let cout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{cout}\n{}\nserver:\n{sout}\n{serr}",
        text(&out.stderr)
    );
    assert_eq!(code, Some(0), "{sout}\n{serr}");
    for title in common::SUITE_TITLES {
        assert!(cout.contains(title), "{title}:\n{cout}");
    }
    assert!(
        cout.contains(" Mode            : CLIENT of 127.0.7.4:18515"),
        "{cout}"
    );
    assert_eq!(cout.matches("data verified: yes").count(), 5, "{cout}");
    // One line per connection on the server, each verified.
    let lines: Vec<&str> = sout.lines().collect();
    assert_eq!(lines.len(), 5, "{sout}");
    for (l, t) in lines
        .iter()
        .zip(["send_lat", "write_lat", "read_lat", "write_bw", "read_bw"])
    {
        assert!(l.contains(t) && l.ends_with("data verified: yes"), "{l}");
    }
}

#[test]
fn a_duration_run_as_two_processes() {
    let (sip, cip, port) = ("127.0.7.6", "127.0.7.5", 47_002);
    let srv = server(&["--json"], sip, port);
    let out = client(
        &["write_lat", "-D", "0.3", "-s", "100", "--json"],
        sip,
        cip,
        port,
    );
    let (code, sout, _) = srv.finish();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(code, Some(0), "{sout}");
    let v = &json_lines(&text(&out.stdout))[0];
    let n = v["iterations"].as_u64().expect("iterations");
    assert!(n > 0 && v["data_verified"] == true, "{v}");
    // The server learned the count from the client's end-of-run message.
    let s = &json_lines(&sout)[0];
    assert_eq!(s["iterations"].as_u64(), Some(n), "{s}");
    assert_eq!(s["data_verified"], true, "{s}");
}

#[test]
fn a_server_refuses_another_test_and_both_say_why() {
    let (sip, cip, port) = ("127.0.7.8", "127.0.7.7", 47_003);
    let srv = server(&["write_bw"], sip, port);
    let out = client(&["read_bw", "-n", "5", "-s", "64"], sip, cip, port);
    let (code, _, serr) = srv.finish();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("ConnectionRefused (errno 111)")
            && err.contains("the server says: this server runs write_bw, not read_bw"),
        "{err}"
    );
    assert_eq!(code, Some(1), "{serr}");
    assert!(
        serr.contains("this server runs write_bw, not read_bw"),
        "{serr}"
    );
}

#[test]
fn no_server_is_a_timeout_not_a_hang() {
    let out = Command::new(EXE)
        .args(["send_lat", "127.0.7.10", "--bind", "127.0.7.9"])
        .args(["--fabric-port", "47004", "--timeout", "1"])
        .output()
        .expect("run rperf");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("TimedOut (errno 110)"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_vfio_device_that_is_not_there_fails_with_vfio_attachs_error() {
    // A function no machine has: the first check that fails names what to fix.
    let bdf = "0000:ff:1f.7";
    let device = format!("vfio:{bdf}");
    for args in [
        &["write_bw", "--server", "--device", &device][..],
        &[
            "send_lat",
            "127.0.7.12",
            "--bind",
            "127.0.7.11",
            "--device",
            &device,
        ],
    ] {
        let out = Command::new(EXE).args(args).output().expect("run rperf");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        let want = if std::path::Path::new("/dev/vfio/vfio").exists() {
            format!("no PCI function {bdf}")
        } else {
            "VFIO is not available: /dev/vfio/vfio does not exist".to_string()
        };
        assert!(
            err.contains(&format!("rperf: error: --device vfio:{bdf}: {want}")),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn two_qps_on_two_threads_as_two_processes() {
    // -q 2: two connections, one thread each on both sides; the server serves them as one run.
    let (sip, cip, port) = ("127.0.7.14", "127.0.7.13", 47_005);
    for t in ["write_bw", "send_lat"] {
        let srv = server(&[t, "--json"], sip, port);
        let mut args = vec![t, "-q", "2", "-n", "30", "-s", "300", "--json"];
        if t.ends_with("_bw") {
            args.extend(["-t", "8"]);
        }
        let out = client(&args, sip, cip, port);
        let (code, sout, serr) = srv.finish();
        let (cout, cerr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "{t}: client {:?}\n{cout}\n{cerr}\nserver:\n{sout}\n{serr}",
            out.status
        );
        assert_eq!(code, Some(0), "{t}: server\n{sout}\n{serr}");
        let c = json_lines(&cout);
        assert_eq!(c.len(), 1, "{t}: {cout}");
        let v = &c[0];
        assert_eq!(v["qps"].as_u64(), Some(2), "{v}");
        // Both QPs' iterations are counted: 30 each.
        assert_eq!(v["iterations"].as_u64(), Some(60), "{v}");
        assert_eq!(v["data_verified"], true, "{v}");
        assert!(cerr.contains(&format!("{t}: data verified: yes")), "{cerr}");
        // The server reports the run once, with the iterations of both connections.
        let s = json_lines(&sout);
        assert_eq!(s.len(), 1, "{t}: {sout}");
        assert_eq!(s[0]["iterations"].as_u64(), Some(60), "{}", s[0]);
        assert_eq!(s[0]["data_verified"], true, "{}", s[0]);
    }
}

/// Event mode (`-e`) on both ends: the latency and bandwidth tests whose waits are for
/// completions sleep on completion channels (the NIC's interrupts) and still verify their
/// data; each end says how many completion events it slept for.
#[test]
fn event_mode_as_two_processes() {
    let (sip, cip, port) = ("127.0.7.16", "127.0.7.15", 47_006);
    for t in ["send_lat", "read_lat", "send_bw", "write_bw"] {
        let srv = server(&[t, "-e", "--json"], sip, port);
        let mut args = vec![t, "-e", "-n", "30", "-s", "3000", "--json"];
        if t.ends_with("_bw") {
            args.extend(["-t", "8"]);
        }
        let out = client(&args, sip, cip, port);
        let (code, sout, serr) = srv.finish();
        let (cout, cerr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "{t}: client {:?}\n{cout}\n{cerr}\nserver:\n{sout}\n{serr}",
            out.status
        );
        assert_eq!(code, Some(0), "{t}: server\n{sout}\n{serr}");
        let v = &json_lines(&cout)[0];
        assert_eq!(v["iterations"].as_u64(), Some(30), "{v}");
        assert_eq!(v["data_verified"], true, "{t}: {v}");
        let s = &json_lines(&sout)[0];
        assert_eq!(s["data_verified"], true, "{t}: {s}");
        // The client waits for every completion (its peer's replies, its READs, its
        // window) and so sleeps at least once; the server of a send test too.
        let slept = |err: &str| -> u64 {
            err.lines()
                .find_map(|l| {
                    let rest = l.split("slept for ").nth(1)?;
                    rest.split(' ').next()?.parse().ok()
                })
                .unwrap_or_else(|| panic!("{t}: no event-mode line in\n{err}"))
        };
        assert!(slept(&cerr) > 0, "{t}: client\n{cerr}");
        if t.starts_with("send") {
            assert!(slept(&serr) > 0, "{t}: server\n{serr}");
        }
    }
}

#[test]
fn event_mode_needs_two_processes_and_a_cq_to_wait_on() {
    for (args, why) in [
        (&["send_lat", "-e"][..], "embedded mode"),
        (&["write_lat", "-e", "127.0.7.2"][..], "memory"),
        (&["-e", "127.0.7.2"][..], "needs a test"),
        (&["write_bw", "-e", "-q", "2", "127.0.7.2"][..], "one QP"),
    ] {
        let out = Command::new(EXE).args(args).output().expect("run rperf");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

#[test]
fn efa_every_test_as_two_processes_over_srd() {
    // --device efa: an emulated EFA per process on the UDP fabric, SRD ids in the UDP port
    // space through the connection manager; the control exchange (RDMA WRITEs with
    // immediate) on SRD, both ends' checks passing.
    let (sip, cip, port) = ("127.0.7.51", "127.0.7.50", 47_020);
    let efa = ["--device", "efa"];
    for t in [
        "send_lat",
        "write_lat",
        "read_lat",
        "send_bw",
        "write_bw",
        "read_bw",
    ] {
        let mut args = vec![t, "-n", "30", "-s", "200", "--json"];
        if t.ends_with("_bw") {
            args.extend(["-t", "8"]);
        }
        args.extend(efa);
        let (cout, cerr, sout) = run_pair(
            &[&[t, "--json"][..], &efa].concat(),
            &args,
            (sip, cip, port),
        );
        let v = &json_lines(&cout)[0];
        assert_eq!(v["test"], t, "{v}");
        assert_eq!(v["iterations"].as_u64(), Some(30), "{v}");
        assert_eq!(v["data_verified"], true, "{v}");
        assert!(cerr.contains(&format!("{t}: data verified: yes")), "{cerr}");
        let s = &json_lines(&sout)[0];
        assert_eq!(s["test"], t, "{s}");
        assert_eq!(s["iterations"].as_u64(), Some(30), "{s}");
        assert_eq!(s["data_verified"], true, "{s}");
    }
    // The banner names SRD, and send_lat's inline threshold is the device's (32 bytes).
    let (cout, _, sout) = run_pair(
        &[&["send_lat"][..], &efa].concat(),
        &[&["send_lat", "-n", "20", "-s", "16"][..], &efa].concat(),
        (sip, cip, port),
    );
    assert!(cout.contains("Transport type : EFA"), "{cout}");
    assert!(cout.contains("Connection type : SRD"), "{cout}");
    assert!(!cout.contains("Connection type : RC"), "{cout}");
    assert!(cout.contains("Max inline data : 32[B]"), "{cout}");
    assert!(cout.ends_with("data verified: yes\n"), "{cout}");
    assert!(sout.contains("data verified: yes"), "{sout}");
    // Two connections on two threads, each an SRD id of its own.
    let (cout, _, _) = run_pair(
        &efa,
        &[
            &["write_bw", "-q", "2", "-n", "20", "-s", "4096", "-t", "8"][..],
            &efa,
        ]
        .concat(),
        (sip, cip, port),
    );
    assert!(cout.contains("Number of qps   : 2"), "{cout}");
    assert!(cout.ends_with("data verified: yes\n"), "{cout}");
}

#[test]
fn efa_large_reads_and_writes_with_a_deep_queue_are_paced_not_lost() {
    // 128 RDMA reads of 64 KiB in flight: about 8 MiB answered at once into one UDP
    // socket, more than its receive buffer holds. The device's SRD send window keeps what
    // is unacknowledged within what the receiver takes, so every read completes (without
    // it the responses overflow the socket, their retransmissions overflow it again and
    // the reads fail with a response timeout).
    let (sip, cip, port) = ("127.0.7.55", "127.0.7.54", 47_022);
    let efa = ["--device", "efa"];
    let t = "read_bw";
    let args = [t, "-n", "256", "-s", "65536", "-t", "128", "--json"];
    let (cout, _, _) = run_pair(
        &[&[t, "--json"][..], &efa].concat(),
        &[&args[..], &efa].concat(),
        (sip, cip, port),
    );
    let v = &json_lines(&cout)[0];
    assert_eq!(v["test"], t, "{v}");
    assert_eq!(v["iterations"].as_u64(), Some(256), "{v}");
    assert_eq!(v["bytes"].as_u64(), Some(65536), "{v}");
    assert_eq!(v["data_verified"], true, "{v}");
    // Writes of 4 MiB, four at a time: 16 MiB posted at once, paced the same way (this
    // part passed without the window too; the reads above are what overflowed).
    let t = "write_bw";
    let args = [t, "-n", "8", "-s", "4194304", "-t", "4", "--json"];
    let (cout, _, _) = run_pair(
        &[&[t, "--json"][..], &efa].concat(),
        &[&args[..], &efa].concat(),
        (sip, cip, port),
    );
    let v = &json_lines(&cout)[0];
    assert_eq!(v["test"], t, "{v}");
    assert_eq!(v["bytes"].as_u64(), Some(4194304), "{v}");
    assert_eq!(v["data_verified"], true, "{v}");
}

#[test]
fn efa_refuses_atomics_and_perftests_rc_exchange_with_a_reason() {
    // No atomics on EFA: either end says so before any connection.
    let run = |args: &[&str]| {
        Command::new(EXE)
            .args(args)
            .args([
                "--device",
                "efa",
                "--fabric-port",
                "47021",
                "--timeout",
                "1",
            ])
            .output()
            .expect("run rperf")
    };
    for args in [
        &["atomic_lat", "127.0.7.53", "--bind", "127.0.7.52"][..],
        &["atomic_lat", "--server", "--bind", "127.0.7.53"][..],
    ] {
        let out = run(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("atomic_lat needs atomic operations") && err.contains("SRD has none"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("listening"), "{err}");
    }
    // perftest's exchange (-R) is RC's.
    let out = run(&["write_bw", "-R", "127.0.7.53", "--bind", "127.0.7.52"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("needs RC QPs"), "{err}");
}
