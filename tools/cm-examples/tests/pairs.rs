//! Each port against itself: the server and the client binaries as two processes on the two
//! ends of an Ethernet link (QEMU's socket-netdev format on 127.0.0.1, ARP on the virtual
//! wire 10.79.N.0/24), their output compared with the C programs' and their checks on
//! stderr. Every pair has a link of its own, so the tests run in parallel.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

fn exe(name: &str) -> &'static str {
    match name {
        "rdma_server" => env!("CARGO_BIN_EXE_rdma_server"),
        "rdma_client" => env!("CARGO_BIN_EXE_rdma_client"),
        "udaddy" => env!("CARGO_BIN_EXE_udaddy"),
        _ => env!("CARGO_BIN_EXE_ucmatose"),
    }
}

/// A server process whose stderr said it listens.
struct Server {
    child: Child,
    err: BufReader<ChildStderr>,
    first: String,
}

impl Server {
    fn start(prog: &str, args: &[String]) -> Server {
        let mut child = Command::new(exe(prog))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server");
        let mut err = BufReader::new(child.stderr.take().expect("stderr"));
        let mut first = String::new();
        err.read_line(&mut first).expect("server stderr");
        assert!(first.contains("listening on"), "{prog}: {first}");
        Server { child, err, first }
    }

    /// (success, stdout, stderr) once it exits (a minute at most).
    fn finish(mut self) -> (bool, String, String) {
        let end = Instant::now() + Duration::from_secs(60);
        let st = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the server did not exit");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut out = String::new();
        let _ = self
            .child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut out);
        let mut err = self.first.clone();
        let _ = self.err.read_to_string(&mut err);
        (st.success(), out, err)
    }
}

/// The common options of the end at 10.79.`net`.`host` on link ports (`local`, `remote`).
fn end(net: u8, host: u8, local: u16, remote: u16) -> Vec<String> {
    vec![
        "--ip".into(),
        format!("10.79.{net}.{host}"),
        "--fabric".into(),
        format!("eth:{local},{remote}"),
        "--timeout".into(),
        "30".into(),
    ]
}

/// Runs server `prog SERVER_ARGS` at .1 and client `prog CLIENT_ARGS -s .1` at .2 on the
/// link 48110 + 2 * net; returns both (stdout, stderr), asserting both exit 0.
fn pair(
    server: &str,
    client: &str,
    net: u8,
    server_args: &[&str],
    client_args: &[&str],
) -> ((String, String), (String, String)) {
    let base = 48110 + 2 * u16::from(net);
    let mut sa = end(net, 1, base, base + 1);
    sa.extend(server_args.iter().map(|s| s.to_string()));
    let srv = Server::start(server, &sa);
    let mut ca = end(net, 2, base + 1, base);
    ca.extend(client_args.iter().map(|s| s.to_string()));
    ca.extend(["-s".to_string(), format!("10.79.{net}.1")]);
    let c = Command::new(exe(client))
        .args(&ca)
        .output()
        .expect("run the client");
    let cout = String::from_utf8_lossy(&c.stdout).into_owned();
    let cerr = String::from_utf8_lossy(&c.stderr).into_owned();
    let (ok, sout, serr) = srv.finish();
    assert!(
        c.status.success(),
        "client: {cout}\n{cerr}\nserver: {sout}\n{serr}"
    );
    assert!(ok, "server: {sout}\n{serr}\nclient: {cout}\n{cerr}");
    ((sout, serr), (cout, cerr))
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn rdma_server_and_rdma_client() {
    let ((sout, serr), (cout, cerr)) = pair("rdma_server", "rdma_client", 0, &[], &[]);
    assert_eq!(lines(&sout), ["rdma_server: start", "rdma_server: end 0"]);
    assert_eq!(lines(&cout), ["rdma_client: start", "rdma_client: end 0"]);
    let zeros = "received 16 bytes: 00000000000000000000000000000000";
    assert!(serr.contains(zeros), "{serr}");
    assert!(cerr.contains(zeros), "{cerr}");
    assert!(
        cerr.contains("connected from 10.79.0.2:") && cerr.contains(" to 10.79.0.1:7471"),
        "{cerr}"
    );
}

#[test]
fn udaddy_two_connections() {
    let ((sout, serr), (cout, cerr)) = pair(
        "udaddy",
        "udaddy",
        1,
        &["-c", "2", "-C", "4"],
        &["-c", "2", "-C", "4"],
    );
    assert_eq!(
        lines(&sout),
        [
            "udaddy: starting server",
            "receiving data transfers",
            "sending replies",
            "data transfers complete",
            "test complete",
            "return status 0"
        ]
    );
    assert_eq!(
        lines(&cout),
        [
            "udaddy: starting client",
            "udaddy: connecting",
            "initiating data transfers",
            "receiving data transfers",
            "data transfers complete",
            "test complete",
            "return status 0"
        ]
    );
    assert!(
        serr.contains("udaddy: 8 messages received, each with its sender's QP number"),
        "{serr}"
    );
    assert!(
        cerr.contains("8 messages received") && cerr.contains("the replies echo the start"),
        "{cerr}"
    );
}

#[test]
fn ucmatose_three_connections() {
    let ((sout, serr), (cout, cerr)) = pair(
        "ucmatose",
        "ucmatose",
        2,
        &["-c", "3", "-C", "4", "-S", "2000"],
        &["-c", "3", "-C", "4", "-S", "2000"],
    );
    assert_eq!(
        lines(&sout),
        [
            "cmatose: starting server",
            "initiating data transfers",
            "completing sends",
            "receiving data transfers",
            "data transfers complete",
            "cmatose: disconnecting",
            "disconnected",
            "test complete",
            "return status 0"
        ]
    );
    assert_eq!(
        lines(&cout),
        [
            "cmatose: starting client",
            "cmatose: connecting",
            "receiving data transfers",
            "sending replies",
            "data transfers complete",
            "test complete",
            "return status 0"
        ]
    );
    assert!(
        serr.contains("12 messages received; the replies echo what was sent"),
        "{serr}"
    );
    assert!(cerr.contains("cmatose: 12 messages received"), "{cerr}");
}

#[test]
fn a_client_without_a_server_fails_as_the_original() {
    // nobody on the far end of the link: address resolution (ARP) times out
    let mut a = end(3, 2, 48117, 48116);
    a.extend(["-s".to_string(), "10.79.3.1".to_string()]);
    let out = Command::new(exe("rdma_client")).args(&a).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        lines(&stdout),
        ["rdma_client: start", "rdma_client: end -1"]
    );
    assert_eq!(out.status.code(), Some(255));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rdma_create_ep"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_command_lines() {
    for (prog, args, want) in [
        ("rdma_server", &["-x"][..], "invalid option -- 'x'"),
        ("rdma_client", &["--fabric", "eth:1,1"], "invalid fabric"),
        ("udaddy", &["-C"], "option requires an argument -- 'C'"),
        ("ucmatose", &["-s", "10.0.0.1"], "--ip ADDR"),
        (
            "ucmatose",
            &["--ip", "10.0.0.1", "-s", "10.0.0.2"],
            "--fabric",
        ),
    ] {
        let out = Command::new(exe(prog)).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{prog} {args:?}: {err}");
        assert!(err.contains(want), "{prog} {args:?}: {err}");
    }
}
