//! Two processes, each with an emulated NIC on the UDP fabric (127.0.0.20 and 127.0.0.21)
//! driven by the mlx5 driver, exchange RC traffic: the `rc-peer` binary at both ends, this
//! test relaying their handshake lines (each one's stdout to the other's stdin) and watching
//! the clock. A run that does not finish in time is killed and fails.
//!
//! Each test uses a UDP port of its own (47910+), so tests run in parallel.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a pair may run before both are killed.
const TIMEOUT: Duration = Duration::from_secs(60);

const SERVER_IP: &str = "127.0.0.20";
const CLIENT_IP: &str = "127.0.0.21";

/// Something a peer printed on stdout (`None`: its stdout closed).
struct Line {
    peer: usize,
    line: Option<String>,
}

/// Two running rc-peer processes with their pipes cross-wired.
struct Pair {
    names: [&'static str; 2],
    children: [Child; 2],
    lines: Receiver<Line>,
    stderr: [Option<JoinHandle<String>>; 2],
    /// Everything each peer printed on stdout, in order.
    stdout: [Vec<String>; 2],
}

/// How a pair ended.
struct Ended {
    status: [ExitStatus; 2],
    stdout: [Vec<String>; 2],
    stderr: [String; 2],
    elapsed: Duration,
}

impl Ended {
    fn result(&self, peer: usize) -> Option<&str> {
        self.stdout[peer]
            .iter()
            .find(|l| l.starts_with("RESULT "))
            .map(String::as_str)
    }

    fn report(&self) -> String {
        let mut s = String::new();
        for p in 0..2 {
            s += &format!(
                "--- peer {p}: {}\nstdout:\n{}\nstderr:\n{}\n",
                self.status[p],
                self.stdout[p].join("\n"),
                self.stderr[p]
            );
        }
        s
    }
}

/// Copies peer `from`'s stdout to `to_stdin` line by line (not its RESULT lines, which are
/// for us), and every line to `tx`. Closes `to_stdin` when `from`'s stdout closes.
fn relay(from: usize, out: impl Read, mut to_stdin: ChildStdin, tx: Sender<Line>) {
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        if !line.starts_with("RESULT ") {
            // The other peer may have exited already: its failure is reported by its status.
            let _ = writeln!(to_stdin, "{line}").and_then(|()| to_stdin.flush());
        }
        if tx
            .send(Line {
                peer: from,
                line: Some(line),
            })
            .is_err()
        {
            break;
        }
    }
    drop(to_stdin);
    let _ = tx.send(Line {
        peer: from,
        line: None,
    });
}

impl Pair {
    /// Starts a server and a client on UDP port `udp_port`, with `extra` arguments for both.
    fn start(udp_port: u16, extra: &[&str]) -> Pair {
        let port = udp_port.to_string();
        let spawn = |role: &str, ip: &str| {
            Command::new(env!("CARGO_BIN_EXE_rc-peer"))
                .args([role, "--ip", ip, "--udp-port", &port])
                .args(extra)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start rc-peer")
        };
        let mut children = [spawn("server", SERVER_IP), spawn("client", CLIENT_IP)];
        let (tx, lines) = mpsc::channel();
        let mut stdin: Vec<ChildStdin> = children
            .iter_mut()
            .map(|c| c.stdin.take().expect("piped stdin"))
            .collect();
        let client_in = stdin.pop().expect("client stdin");
        let server_in = stdin.pop().expect("server stdin");
        let server_out = children[0].stdout.take().expect("piped stdout");
        let client_out = children[1].stdout.take().expect("piped stdout");
        let t = tx.clone();
        thread::spawn(move || relay(0, server_out, client_in, t));
        thread::spawn(move || relay(1, client_out, server_in, tx));
        let stderr = children.each_mut().map(|c| {
            let mut e = c.stderr.take().expect("piped stderr");
            Some(thread::spawn(move || {
                let mut s = String::new();
                let _ = e.read_to_string(&mut s);
                s
            }))
        });
        Pair {
            names: ["server", "client"],
            children,
            lines,
            stderr,
            stdout: [Vec::new(), Vec::new()],
        }
    }

    /// Runs until both peers exit, calling `on_line` for every stdout line (it may kill a
    /// peer). Past [`TIMEOUT`], kills both and panics with everything they printed.
    fn wait(mut self, mut on_line: impl FnMut(usize, &str, &mut [Child; 2])) -> Ended {
        let start = Instant::now();
        let mut status: [Option<ExitStatus>; 2] = [None, None];
        let mut open = [true, true];
        while status.iter().any(Option::is_none) || open.iter().any(|&o| o) {
            match self.lines.recv_timeout(Duration::from_millis(20)) {
                Ok(Line {
                    peer,
                    line: Some(l),
                }) => {
                    on_line(peer, &l, &mut self.children);
                    self.stdout[peer].push(l);
                }
                Ok(Line { peer, line: None }) => open[peer] = false,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => open = [false, false],
            }
            for (p, c) in self.children.iter_mut().enumerate() {
                if status[p].is_none() {
                    status[p] = c.try_wait().expect("try_wait");
                }
            }
            if start.elapsed() > TIMEOUT {
                for c in &mut self.children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                let ended = self.collect(status.map(|s| s.unwrap_or_default()), start);
                panic!(
                    "the pair did not finish in {TIMEOUT:?}; killed both\n{}",
                    ended.report()
                );
            }
        }
        let status = status.map(|s| s.expect("exited"));
        self.collect(status, start)
    }

    fn collect(&mut self, status: [ExitStatus; 2], start: Instant) -> Ended {
        let stderr = self.stderr.each_mut().map(|h| {
            h.take()
                .map(|h| h.join().unwrap_or_default())
                .unwrap_or_default()
        });
        Ended {
            status,
            stdout: std::mem::take(&mut self.stdout),
            stderr,
            elapsed: start.elapsed(),
        }
    }
}

impl Drop for Pair {
    /// No peer outlives its test, whatever happened.
    fn drop(&mut self) {
        for c in &mut self.children {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// The value of `key=value` in a result line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

#[test]
fn two_processes_exchange_rc_send_write_read() {
    let iters = 32u64;
    let pair = Pair::start(47_910, &["--iters", &iters.to_string()]);
    let names = pair.names;
    let ended = pair.wait(|_, _, _| {});
    let report = ended.report();
    for (p, name) in names.iter().enumerate() {
        assert!(ended.status[p].success(), "{name} failed\n{report}");
        let result = ended
            .result(p)
            .unwrap_or_else(|| panic!("{name} printed no result\n{report}"));
        assert!(
            result.starts_with(&format!("RESULT ok role={name} iters={iters} ")),
            "{name}: {result}\n{report}"
        );
        // The frames came through the UDP socket: per exchange at least the peer's WRITE,
        // READ request and SEND, and the READ response and SEND ACK for our own turn.
        let rx_frames: u64 = field(result, "rx_frames").parse().expect("rx_frames");
        assert!(rx_frames >= 5 * iters, "{name}: {result}");
        eprintln!("{result}");
    }
    eprintln!("pair finished in {:.2?}", ended.elapsed);
}

#[test]
fn a_vanished_peer_fails_the_other_instead_of_hanging() {
    // The server is killed as soon as it is connected; the client's first exchange runs into
    // a dead port: retransmissions run out (an error completion) or its wait times out.
    let pair = Pair::start(47_911, &["--iters", "4", "--timeout-s", "5"]);
    let ended = pair.wait(|peer, line, children| {
        if peer == 0 && line == "READY" {
            let _ = children[0].kill();
        }
    });
    let report = ended.report();
    assert!(!ended.status[0].success(), "server was killed\n{report}");
    assert_eq!(ended.status[1].code(), Some(1), "client\n{report}");
    let result = ended.result(1).unwrap_or_default();
    assert!(
        result.starts_with("RESULT fail role=client"),
        "client: {result:?}\n{report}"
    );
    eprintln!("{result} (after {:.2?})", ended.elapsed);
}
