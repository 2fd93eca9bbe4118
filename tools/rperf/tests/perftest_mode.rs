//! perftest's rdma_cm exchange (`-R`) between two rperf processes: `rperf TEST -R --server`
//! and `rperf TEST -R PEER`, on the UDP fabric and on an Ethernet link (`--fabric eth:`),
//! for every test the exchange covers. Both must exit 0 and print a row of figures for the
//! size and iterations asked; a bandwidth server prints the client's own figures, received
//! through the exchange.
//!
//! Addresses: 127.0.94.0/24 (UDP fabric port 47940); 10.78.94.0/24 on the Ethernet link
//! (UDP ports 47941/47942). One test function per fabric: they run in parallel.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_rperf");
/// A test fails rather than hangs: each process gets this long.
const LIMIT: Duration = Duration::from_secs(60);

fn start(args: &[String]) -> Child {
    Command::new(EXE)
        .args(args)
        .args(["--timeout", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rperf")
}

/// Waits for `child` (killing it after [`LIMIT`]): exit code, stdout, stderr.
fn finish(
    mut child: Child,
    err_rx: Option<mpsc::Receiver<String>>,
) -> (Option<i32>, String, String) {
    let deadline = Instant::now() + LIMIT;
    let code = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    let mut err = String::new();
    match err_rx {
        Some(rx) => err = rx.try_iter().collect::<Vec<_>>().join("\n"),
        None => {
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
        }
    }
    (code, out, err)
}

/// Starts a server and waits for its "listening" line.
fn server(args: Vec<String>) -> (Child, mpsc::Receiver<String>) {
    let mut child = start(&args);
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
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) if l.contains("listening on") => return (child, rx),
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                let (code, out, _) = finish(child, None);
                panic!("{args:?}: the server did not start listening: {code:?}\n{out}");
            }
        }
    }
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// The figures row for `size` and `iters` in `out` (the line after the header).
fn row(out: &str, size: usize, iters: usize) -> Option<String> {
    let mut lines = out.lines();
    lines.find(|l| l.trim_start().starts_with("#bytes"))?;
    let r = lines.next()?.to_string();
    let f: Vec<&str> = r.split_whitespace().collect();
    let ok = f.len() >= 5
        && f[0] == size.to_string()
        && f[1] == iters.to_string()
        && f[2..]
            .iter()
            .all(|x| x.parse::<f64>().is_ok_and(|v| v > 0.0));
    ok.then_some(r)
}

/// Runs `test` at `size` for `iters` between a server (`srv` options) and a client (`cli`).
fn pair(test: &str, size: usize, iters: usize, srv: &[&str], cli: &[&str]) {
    let common = [
        test.to_string(),
        "-R".into(),
        "-s".into(),
        size.to_string(),
        "-n".into(),
        iters.to_string(),
    ];
    let mut sa = common.to_vec();
    sa.push("--server".into());
    sa.extend(strings(srv));
    let (s, s_err) = server(sa);
    let mut ca = common.to_vec();
    ca.extend(strings(cli));
    let c = start(&ca);
    let (c_code, c_out, c_err) = finish(c, None);
    let (s_code, s_out, s_err) = finish(s, Some(s_err));
    let ctx =
        format!("{test}: client {c_code:?}\n{c_out}\n{c_err}\nserver {s_code:?}\n{s_out}\n{s_err}");
    assert_eq!((c_code, s_code), (Some(0), Some(0)), "{ctx}");
    assert!(c_out.contains("perftest 6.06 there"), "{ctx}");
    assert!(s_out.contains("perftest 6.06 there"), "{ctx}");
    // The latency server times one round trip fewer (it cannot time its first answer).
    let c_row = row(
        &c_out,
        size,
        if test == "write_lat" {
            iters - 1
        } else {
            iters
        },
    );
    let c_row = c_row.unwrap_or_else(|| panic!("no client row: {ctx}"));
    match test {
        "write_bw" | "read_bw" => {
            assert!(s_out.contains("the client's figures"), "{ctx}");
            assert_eq!(row(&s_out, size, iters), Some(c_row), "{ctx}");
        }
        "send_lat" => assert!(row(&s_out, size, iters - 1).is_some(), "{ctx}"),
        _ => assert!(row(&s_out, size, iters).is_some(), "{ctx}"),
    }
}

const TESTS: [&str; 5] = ["send_lat", "send_bw", "write_lat", "write_bw", "read_bw"];

#[test]
fn every_test_on_the_udp_fabric() {
    for (k, test) in TESTS.iter().enumerate() {
        let size = if k % 2 == 0 { 2 } else { 8192 };
        pair(
            test,
            size,
            20,
            &["--bind", "127.0.94.2", "--fabric-port", "47940"],
            &[
                "127.0.94.2",
                "--bind",
                "127.0.94.1",
                "--fabric-port",
                "47940",
            ],
        );
    }
}

#[test]
fn every_test_on_an_ethernet_link() {
    for test in TESTS {
        pair(
            test,
            4096,
            10,
            &["--bind", "10.78.94.2", "--fabric", "eth:47941,47942"],
            &[
                "10.78.94.2",
                "--bind",
                "10.78.94.1",
                "--fabric",
                "eth:47942,47941",
            ],
        );
    }
}

#[test]
fn bad_command_lines() {
    for bad in [
        &["read_lat", "-R", "--server"][..],
        &["write_bw", "-R"],
        &["write_bw", "-R", "--server", "-a"],
        &["write_bw", "-R", "127.0.0.2", "--json"],
        &["write_bw", "--fabric", "eth:1"],
        &["write_bw", "--fabric", "eth:5,5", "--server"],
        &["write_bw", "--fabric", "eth:5,6"],
        &["write_bw", "--fabric", "tcp:5"],
    ] {
        let out = Command::new(EXE).args(bad).output().expect("run rperf");
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
}
